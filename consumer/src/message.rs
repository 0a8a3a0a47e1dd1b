//! A delivered message as the consumer sees it, whatever the broker: its id, its body, which
//! delivery of it this is; and how its idempotency key is found.

use std::fmt;
use std::sync::Arc;

use idem_core::{DeadLetterReason, Fingerprint};

/// One delivery of a message, broker-neutral, owned by the handler that runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The message's id as the producer set it (AMQP `message_id`, JetStream `Nats-Msg-Id`).
    pub id: Option<String>,
    /// The message's body.
    pub body: Vec<u8>,
    /// Which delivery of the message this is, 1 for the first, as far as the broker says
    /// (see the broker's module for where it comes from).
    pub delivery: u32,
}

/// A function that finds a message's key: `None` is a message without one.
pub type KeyFunction = Arc<dyn Fn(&Message) -> Option<String> + Send + Sync>;

/// Where a message's idempotency key comes from.
#[derive(Clone, Default)]
pub enum KeyFrom {
    /// The message id (the default): a producer that publishes the same message twice sends
    /// the same id.
    #[default]
    MessageId,
    /// A function of the message (a header, an order id in the body). `None` is a message
    /// without a key.
    Function(KeyFunction),
}

impl fmt::Debug for KeyFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyFrom::MessageId => f.write_str("MessageId"),
            KeyFrom::Function(_) => f.write_str("Function(..)"),
        }
    }
}

impl KeyFrom {
    /// The key of `message` and its fingerprint (its body, so that an id reused for another
    /// body is key reuse, `I4`), or [`DeadLetterReason::NoKey`]: a message without a key is
    /// never run unprotected. The key's validity is the driver's to judge (`I12`).
    pub fn key(&self, message: &Message) -> Result<(String, Fingerprint), DeadLetterReason> {
        let key = match self {
            KeyFrom::MessageId => message.id.clone(),
            KeyFrom::Function(key) => key(message),
        };
        let key = key
            .filter(|key| !key.is_empty())
            .ok_or(DeadLetterReason::NoKey)?;
        Ok((key, Fingerprint::of_bytes(&message.body)))
    }
}
