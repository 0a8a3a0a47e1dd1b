//! A TCP proxy between the store and one Redis server, for link faults.
//!
//! - [`Proxy::stall`]: nothing passes in either direction until [`Proxy::resume`] (a
//!   stalled link: the client's bytes wait in the proxy, replies do not come back).
//! - [`Proxy::cut_after_next_reply`]: the next bytes the server sends are swallowed and the
//!   client's connection is closed. The server has applied the command; the client only
//!   sees a dropped connection. (TCP cannot lose one reply and keep the stream: a reply is
//!   delivered or the connection breaks, so this is what a lost reply looks like.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug)]
struct Control {
    stalled: watch::Sender<bool>,
    cut_next_reply: AtomicBool,
    swallowed: AtomicU64,
    connections: AtomicU64,
}

/// A running proxy; stops when dropped.
#[derive(Debug)]
pub struct Proxy {
    pub port: u16,
    control: Arc<Control>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free port and forwards every connection to `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let (stalled, _) = watch::channel(false);
        let control = Arc::new(Control {
            stalled,
            cut_next_reply: AtomicBool::new(false),
            swallowed: AtomicU64::new(0),
            connections: AtomicU64::new(0),
        });
        let accept_control = control.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let control = accept_control.clone();
                control.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await {
                        relay(client, server, control).await;
                    }
                });
            }
        });
        Self {
            port,
            control,
            task,
        }
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Holds every byte in both directions until [`resume`](Self::resume).
    pub fn stall(&self) {
        self.control.stalled.send_replace(true);
    }

    /// Lets bytes through again.
    pub fn resume(&self) {
        self.control.stalled.send_replace(false);
    }

    /// Swallows the next reply from the server and closes that client connection.
    pub fn cut_after_next_reply(&self) {
        self.control.cut_next_reply.store(true, Ordering::SeqCst);
    }

    /// How many replies were swallowed.
    pub fn swallowed(&self) -> u64 {
        self.control.swallowed.load(Ordering::SeqCst)
    }

    /// How many client connections were accepted.
    pub fn connections(&self) -> u64 {
        self.control.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(client: TcpStream, server: TcpStream, control: Arc<Control>) {
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let upstream = pump(client_read, server_write, control.clone(), false);
    let downstream = pump(server_read, client_write, control, true);
    // Either direction ending (EOF, error, a cut) ends the connection: dropping the halves
    // closes both sockets.
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
}

async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    control: Arc<Control>,
    replies: bool,
) {
    let mut stalled = control.stalled.subscribe();
    let mut buffer = vec![0; 64 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if stalled.wait_for(|stalled| !*stalled).await.is_err() {
            return;
        }
        if replies && control.cut_next_reply.swap(false, Ordering::SeqCst) {
            control.swallowed.fetch_add(1, Ordering::SeqCst);
            return;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}
