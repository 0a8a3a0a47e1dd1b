//! Loopback ports for the servers tests start.

use std::net::TcpListener;

/// A free TCP port on 127.0.0.1: bound, then released for the server to take. Another
/// process can take it first; the harnesses that start servers try again on another.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}
