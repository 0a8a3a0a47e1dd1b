//! Test harness of the Redis store: the servers (`idem_tests::redis`, shared with every crate
//! whose tests need Redis), the attempt and card helpers, the broken stores, the Redis
//! subjects of the conformance kit's differential check, and a TCP proxy that can stall a
//! link or cut it after swallowing a reply.

#![allow(dead_code, unused_imports)]

pub mod attempt;
pub mod broken;
pub mod card;
pub mod differential;
pub mod proxy;
pub mod scenarios;

pub use idem_tests::net::free_port;
pub use idem_tests::redis::{RedisCluster, RedisServer, raw_command};
