//! A command as its Lua script ([`crate::scripts`]): the script's arguments, and the call
//! on the store's connection.

use std::time::Duration;

use idem::StoreError;
use idem_core::record::{Command, Reply, StoredResult};
use idem_core::{Fingerprint, Key, Operation, OwnerToken, Timestamp};
use redis::{Script, Value};

use super::RedisStore;
use super::connection::Connection;
use super::reply::parse_reply;
use crate::codec::MAX_DEADLINE_MS;

impl RedisStore {
    /// Runs `command`'s script on `key`: the reply, and the server's clock when the script
    /// decided.
    pub(super) async fn run(
        &self,
        operation: &Operation,
        key: &Key,
        command: &Command,
    ) -> Result<(Reply, Timestamp), StoreError> {
        let redis_key = self.inner.layout.record_key(operation, key);
        let scripts = &self.inner.scripts;
        let channel = || {
            self.inner
                .notices
                .as_ref()
                .map_or_else(Vec::new, |notices| {
                    notices.publish_command().as_bytes().to_vec()
                })
        };
        let (script, args): (&Script, Vec<Vec<u8>>) = match command {
            Command::Reserve {
                owner,
                fingerprint,
                lease,
            } => (
                &scripts.reserve,
                vec![
                    token(*owner),
                    print(*fingerprint),
                    millis(*lease),
                    if self.inner.notices.is_some() {
                        b"1".to_vec()
                    } else {
                        b"0".to_vec()
                    },
                ],
            ),
            Command::Complete {
                owner,
                fingerprint,
                result,
                retention,
            } => {
                let (flag, bytes) = match result {
                    StoredResult::Value(body) => (b"1".to_vec(), body.as_bytes().to_vec()),
                    StoredResult::NotStored => (b"0".to_vec(), Vec::new()),
                    StoredResult::Panicked => (b"2".to_vec(), Vec::new()),
                };
                (
                    &scripts.complete,
                    vec![
                        token(*owner),
                        print(*fingerprint),
                        flag,
                        bytes,
                        millis(*retention),
                        channel(),
                    ],
                )
            }
            Command::Renew { owner, lease } => {
                (&scripts.renew, vec![token(*owner), millis(*lease)])
            }
            Command::Release { owner } => (&scripts.release, vec![token(*owner), channel()]),
            Command::Read => (&scripts.read, Vec::new()),
        };
        let mut invocation = script.key(&redis_key);
        for arg in args {
            invocation.arg(arg);
        }
        let call = async {
            match &self.inner.connection {
                Connection::Standalone(manager) => {
                    invocation.invoke_async::<Value>(&mut manager.clone()).await
                }
                Connection::Cluster(cluster) => {
                    invocation.invoke_async::<Value>(&mut cluster.clone()).await
                }
            }
        };
        let value = self.within_timeout(command, call).await?;
        parse_reply(command, &redis_key, value)
    }
}

fn token(owner: OwnerToken) -> Vec<u8> {
    owner.to_bytes().to_vec()
}

fn print(fingerprint: Fingerprint) -> Vec<u8> {
    fingerprint.to_bytes().to_vec()
}

/// Whole milliseconds, as the core rounds them, capped where Lua's numbers stay exact.
fn millis(duration: Duration) -> Vec<u8> {
    let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    ms.min(MAX_DEADLINE_MS).to_string().into_bytes()
}
