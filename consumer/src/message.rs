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
    /// The message's headers whose values are text, in the order the broker gave them (a
    /// name may come more than once). On RabbitMQ, numbers, booleans and timestamps are
    /// written in decimal and other kinds of value are left out; on JetStream every header
    /// is text.
    pub headers: Vec<(String, String)>,
}

impl Message {
    /// The fingerprint of the message: its body and, if `headers` names any, those headers'
    /// values, so that a key reused with another body or another value of a chosen header
    /// is key reuse (`I4`). With no header named it is the body's alone, as a record written
    /// before headers were chosen holds. A header that is absent differs from one that is
    /// empty; one that comes twice counts both values, in order.
    pub fn fingerprint(&self, headers: &[String]) -> Fingerprint {
        if headers.is_empty() {
            return Fingerprint::of_bytes(&self.body);
        }
        // Every part length-prefixed, so that no two messages encode alike.
        let mut encoded = Vec::with_capacity(self.body.len() + 64);
        let mut part = |bytes: &[u8]| {
            encoded.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
            encoded.extend_from_slice(bytes);
        };
        part(b"idem-consumer message, body and headers");
        part(&self.body);
        let mut names: Vec<&String> = headers.iter().collect();
        names.sort();
        names.dedup();
        for name in names {
            part(name.as_bytes());
            let values: Vec<&str> = self
                .headers
                .iter()
                .filter(|(header, _)| header == name)
                .map(|(_, value)| value.as_str())
                .collect();
            part(&(values.len() as u64).to_be_bytes());
            for value in values {
                part(value.as_bytes());
            }
        }
        Fingerprint::of_bytes(&encoded)
    }
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
        Ok((self.key_of(message)?, message.fingerprint(&[])))
    }

    /// The key of `message` alone, or [`DeadLetterReason::NoKey`].
    pub fn key_of(&self, message: &Message) -> Result<String, DeadLetterReason> {
        let key = match self {
            KeyFrom::MessageId => message.id.clone(),
            KeyFrom::Function(key) => key(message),
        };
        key.filter(|key| !key.is_empty())
            .ok_or(DeadLetterReason::NoKey)
    }
}
