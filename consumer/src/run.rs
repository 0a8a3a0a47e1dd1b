//! The consuming loop every broker shares: take deliveries while handler slots are free, decide
//! each one's call, keep it alive while it runs, settle it, and at a stop let running handlers
//! finish for the grace.

use std::future::Future;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use idem::{BoxError, Codec, Store};
use idem_core::Disposition;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use crate::consumer::{Calls, ConsumeReport, Consumer};
use crate::message::Message;

/// One delivery as a broker hands it over, and how the broker is told about it.
pub(crate) trait BrokerDelivery: Send + 'static {
    /// The message, taken out of the delivery (its body moved, not copied).
    fn take_message(&mut self) -> Message;

    /// Tells the broker the delivery is still being worked on (JetStream's progress ack),
    /// so that it is not delivered again to another consumer meanwhile. A broker without
    /// such a deadline does nothing.
    fn keep_alive(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Tells the broker the disposition. A redelivery's delay is the broker's to keep if it
    /// can, or waited out here until it has passed or `stopped` turns true.
    fn settle(
        self,
        disposition: Disposition,
        stopped: watch::Receiver<bool>,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;
}

impl<S, T, E, C> Consumer<S, T, E, C>
where
    S: Store,
    T: Send + 'static,
    E: Send + 'static,
    C: Codec<T> + Clone,
{
    /// The loop over `deliveries` until it ends or `stop` resolves, then the grace.
    pub(crate) async fn run_deliveries<D, Er, R>(
        &self,
        deliveries: impl Stream<Item = Result<D, Er>>,
        calls: R,
        stop: impl Future<Output = ()>,
    ) -> ConsumeReport
    where
        D: BrokerDelivery,
        Er: std::fmt::Display,
        R: Calls<S, T, E, C>,
    {
        let slots = Arc::new(Semaphore::new(self.concurrency));
        let (stopping, stopped) = watch::channel(false);
        let mut running = JoinSet::new();
        let mut stop = std::pin::pin!(stop);
        let mut deliveries = std::pin::pin!(deliveries);
        loop {
            let slot = tokio::select! {
                biased;
                () = &mut stop => break,
                slot = slots.clone().acquire_owned() => slot,
            };
            let Ok(slot) = slot else { break };
            let delivery = tokio::select! {
                biased;
                () = &mut stop => break,
                delivery = deliveries.next() => delivery,
            };
            let delivery = match delivery {
                Some(Ok(delivery)) => delivery,
                Some(Err(error)) => {
                    tracing::warn!(%error, "the broker's delivery stream failed; consuming stops");
                    break;
                }
                None => break,
            };
            let this = self.clone();
            let calls = calls.clone();
            let stopped = stopped.clone();
            running.spawn(async move {
                this.handle(delivery, &calls, slot, stopped).await;
            });
            while running.try_join_next().is_some() {}
        }
        // The stop: redeliveries waiting out their delay are handed back now, running
        // handlers get the grace.
        let _ = stopping.send(true);
        let finished = tokio::time::timeout(self.grace, async {
            while running.join_next().await.is_some() {}
        })
        .await;
        if finished.is_err() {
            self.counts.cut(running.len() as u64);
            running.abort_all();
        }
        self.report()
    }

    async fn handle<D: BrokerDelivery, R: Calls<S, T, E, C>>(
        &self,
        mut delivery: D,
        calls: &R,
        slot: OwnedSemaphorePermit,
        stopped: watch::Receiver<bool>,
    ) {
        let message = delivery.take_message();
        // While the call runs, the delivery is kept alive at the lease's renewal cadence: as
        // long as idem holds the key for this delivery, the broker holds the message for it.
        let every = self.operation.coordinator().options().renew_every();
        let decided = {
            let call = self.decide(message, calls);
            let mut call = std::pin::pin!(call);
            loop {
                tokio::select! {
                    decided = &mut call => break decided,
                    () = tokio::time::sleep(every) => delivery.keep_alive().await,
                }
            }
        };
        drop(slot);
        match delivery.settle(decided.disposition, stopped).await {
            Ok(()) => self.counts.settled(&decided),
            Err(error) => {
                tracing::warn!(%error, "the broker did not take the settlement; it will deliver the message again");
                self.counts.unsettled();
            }
        }
    }
}
