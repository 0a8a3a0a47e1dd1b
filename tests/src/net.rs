//! Loopback ports for the servers tests start, and unique names for the databases they make.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A free TCP port on 127.0.0.1: bound, then released for the server to take. Another
/// process can take it first; the harnesses that start servers try again on another.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}

/// A name no other test, run or process uses at the same time.
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000_000,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
