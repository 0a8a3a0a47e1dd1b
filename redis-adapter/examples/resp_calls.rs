//! Writes to stdout, as raw RESP, the requests the store sends for `N` calls, so that a
//! server's own cost per call can be counted apart from any client: `fresh` is a fast
//! reserve and a fast complete on each of `N` new keys (the store's path by default);
//! `replay` is the same followed by one reserve on each completed key (`replay-time-left`:
//! the reserve as `replay_time_left(true)` sends it, `MULTI`, `SET … GET`, `PTTL`, `EXEC`);
//! `complete-script` is
//! `fresh` with the complete sent as the complete script (`fast_complete(false)`);
//! `scripted` sends both as their scripts (`single_command_reserve(false)` and
//! `fast_complete(false)`); `fenced` is the fresh call of a store that hands out fences
//! (`fences(true)`): the fenced fast reserve, then the fast complete; `fenced-script` the
//! same with the reserve sent as the reserve script granting under a fence (what
//! `single_command_reserve(false)` sends); `ping` is `N` PINGs.
//!
//! ```text
//! cargo run -p idem-redis --example resp_calls -- fresh 20000 > fresh.resp
//! redis-cli -p PORT --pipe < fresh.resp
//! ```
//!
//! BENCHMARKS.md runs it against `redis-server` under callgrind, which counts
//! instructions: the same count on every run, whatever else the machine is doing.

use std::io::{self, Write};

use idem_core::record::StoredResult;
use idem_core::{Body, Fingerprint, Key, Operation, OwnerToken};
use idem_redis::{KeyLayout, codec, scripts};

/// One request in RESP: an array of bulk strings.
fn request(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

fn main() -> io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(kind), Some(Ok(calls))) = (args.next(), args.next().map(|n| n.parse::<u64>())) else {
        eprintln!(
            "usage: resp_calls fresh|replay|replay-time-left|complete-script|scripted|fenced|fenced-script|ping N"
        );
        std::process::exit(2);
    };
    let owner = OwnerToken::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
    let fingerprint = Fingerprint::of_bytes(b"{\"amount\":100}");
    let (owner_bytes, fingerprint_bytes) = (owner.to_bytes(), fingerprint.to_bytes());
    let reservation = codec::encode_pending(owner, fingerprint);
    let body = b"\"ch_1\"";
    let completed = codec::encode_completed(
        owner,
        fingerprint,
        &StoredResult::Value(Body::new(&body[..])),
    );
    let complete = scripts::source("complete").unwrap_or_default();
    let sha = redis::Script::new(&complete).get_hash().to_owned();
    let complete_own = scripts::source("complete_own").unwrap_or_default();
    let own_sha = redis::Script::new(&complete_own).get_hash().to_owned();
    let reserve_script = scripts::source("reserve").unwrap_or_default();
    let reserve_sha = redis::Script::new(&reserve_script).get_hash().to_owned();
    let reserve_fenced = scripts::source("reserve_fenced").unwrap_or_default();
    let fenced_sha = redis::Script::new(&reserve_fenced).get_hash().to_owned();
    let fenced_header = codec::fenced_header(owner, fingerprint);
    let layout = KeyLayout::default();
    let operation = Operation::new("payment.charge").unwrap_or_else(|_| unreachable!());
    let key = |i: u64| {
        let key = Key::new(format!("order-{i:08}")).unwrap_or_else(|_| unreachable!());
        layout.record_key(&operation, &key)
    };
    // The store's reserve: a 30 s lease, the key expiring a millisecond before it ends.
    let reserve = |out: &mut Vec<u8>, i: u64| {
        let key = key(i);
        request(
            out,
            &[
                b"SET",
                key.as_bytes(),
                &reservation,
                b"NX",
                b"PX",
                b"29999",
                b"GET",
            ],
        );
    };
    let mut out = Vec::new();
    match kind.as_str() {
        "ping" => (0..calls).for_each(|_| request(&mut out, &[b"PING"])),
        "fresh" | "replay" | "replay-time-left" | "complete-script" | "scripted" | "fenced"
        | "fenced-script" => {
            request(&mut out, &[b"SCRIPT", b"LOAD", complete.as_bytes()]);
            request(&mut out, &[b"SCRIPT", b"LOAD", complete_own.as_bytes()]);
            request(&mut out, &[b"SCRIPT", b"LOAD", reserve_script.as_bytes()]);
            request(&mut out, &[b"SCRIPT", b"LOAD", reserve_fenced.as_bytes()]);
            for i in 0..calls {
                if kind == "fenced" {
                    // The fenced fast reserve: the reservation's header, the lease less a
                    // millisecond, no PTTL.
                    let key = key(i);
                    let reserve: [&[u8]; 7] = [
                        b"EVALSHA",
                        fenced_sha.as_bytes(),
                        b"1",
                        key.as_bytes(),
                        &fenced_header,
                        b"29999",
                        b"0",
                    ];
                    request(&mut out, &reserve);
                } else if kind == "scripted" || kind == "fenced-script" {
                    // owner, fingerprint, a 30 s lease, no change notices, fences or not.
                    let key = key(i);
                    let fences: &[u8] = if kind == "fenced-script" { b"1" } else { b"0" };
                    let reserve: [&[u8]; 9] = [
                        b"EVALSHA",
                        reserve_sha.as_bytes(),
                        b"1",
                        key.as_bytes(),
                        &owner_bytes,
                        &fingerprint_bytes,
                        b"30000",
                        b"0",
                        fences,
                    ];
                    request(&mut out, &reserve);
                } else {
                    reserve(&mut out, i);
                }
                let key = key(i);
                if kind == "fresh" || kind.starts_with("fenced") || kind.starts_with("replay") {
                    // The fast complete: the pending record, the completed one, one day's
                    // retention less a millisecond.
                    let complete: [&[u8]; 7] = [
                        b"EVALSHA",
                        own_sha.as_bytes(),
                        b"1",
                        key.as_bytes(),
                        &reservation,
                        &completed,
                        b"86399999",
                    ];
                    request(&mut out, &complete);
                    continue;
                }
                // As `RedisStore` sends the complete script: owner, fingerprint, "a body
                // follows", the body, one day's retention, no change channel.
                let complete: [&[u8]; 10] = [
                    b"EVALSHA",
                    sha.as_bytes(),
                    b"1",
                    key.as_bytes(),
                    &owner_bytes,
                    &fingerprint_bytes,
                    b"1",
                    body,
                    b"86400000",
                    b"",
                ];
                request(&mut out, &complete);
            }
            if kind == "replay" {
                (0..calls).for_each(|i| reserve(&mut out, i));
            }
            if kind == "replay-time-left" {
                for i in 0..calls {
                    request(&mut out, &[b"MULTI"]);
                    reserve(&mut out, i);
                    request(&mut out, &[b"PTTL", key(i).as_bytes()]);
                    request(&mut out, &[b"EXEC"]);
                }
            }
        }
        _ => {
            eprintln!(
                "unknown kind {kind:?}: fresh, replay, replay-time-left, complete-script, scripted, fenced, fenced-script or ping"
            );
            std::process::exit(2);
        }
    }
    io::stdout().lock().write_all(&out)
}
