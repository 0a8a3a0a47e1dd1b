//! Runs on a real Redis, standalone, through the driver and [`idem_redis::RedisStore`].
//!
//! - [`table`]: the article's scenarios, whose rows must match the simulated ones;
//! - [`mod@bench`]: idem's calls per second, round trips and server commands per call, against
//!   raw `PING` and the adapter's own commands in the same run.

pub mod bench;
pub mod table;
