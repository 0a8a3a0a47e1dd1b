//! Idempotent message consumers on idem: each message's effect once, however often the broker
//! delivers it.
//!
//! Every broker delivers at least once: a consumer that crashed before its ack, an ack lost
//! with its connection, an ack deadline that ran out under a slow handler, a producer that
//! published twice. A [`Consumer`] runs each delivery as a call of one operation under the
//! message's key (its message id by default, [`KeyFrom`]) with the body as its fingerprint,
//! and tells the broker only what the record says (MODEL.md, "Consumers", `C1`):
//!
//! - the effect is recorded (it ran now, or an earlier delivery ran it): **ack**;
//! - nothing is recorded and another delivery may succeed (the handler failed, the store is
//!   down, the consumer stops): **delivered again** after the core's delay, until the
//!   deliveries are spent ([`Redelivery`]), then dead-lettered;
//! - another delivery of the message is running: delivered again after a delay, never run
//!   beside it;
//! - the message can never succeed (no key, an invalid key, the key reused for another body,
//!   a corrupt record, an earlier delivery that panicked): **dead-lettered** with the reason.
//!
//! A handler can take one message at a time (`run_amqp`, `run_nats`), write in the store's
//! own database with the record (`run_amqp_in_transaction`, `run_nats_in_transaction`), or
//! take batches with an outcome per message (`run_amqp_batches`, `run_nats_batches`).
//!
//! ```no_run
//! # async fn run(
//! #     channel: lapin::Channel,
//! #     stop: tokio::sync::oneshot::Receiver<()>,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! use idem::{Coordinator, MemoryStore, Options};
//! use idem_consumer::{Consumer, Message};
//!
//! let coordinator = Coordinator::new(MemoryStore::new(), Options::default());
//! let orders = coordinator.operation::<(), std::io::Error>("orders.ship")?;
//! let deliveries = channel
//!     .basic_consume(
//!         "orders".into(),
//!         "shipper".into(),
//!         Default::default(),
//!         Default::default(),
//!     )
//!     .await?;
//! let report = Consumer::new(orders)
//!     .run_amqp(
//!         deliveries,
//!         |claim: idem::Claim, message: Message| async move {
//!             // Ship the order in `message.body`, passing `claim.downstream_key()` on.
//!             let _ = (claim, message);
//!             Ok(())
//!         },
//!         async { let _ = stop.await; },
//!     )
//!     .await;
//! println!("{report:?}");
//! # Ok(())
//! # }
//! ```

#[cfg(feature = "amqp")]
pub mod amqp;
mod batch;
mod call_end;
mod consumer;
mod message;
#[cfg(feature = "nats")]
pub mod nats;
mod run;

pub use batch::BatchError;
pub use call_end::call_end;
pub use consumer::{ConsumeReport, Consumer};
pub use idem_core::{CallEnd, DeadLetterReason, Disposition, Redelivery, RedeliveryError};
pub use message::{KeyFrom, KeyFunction, Message};
