//! Takes the uncontended cycle apart: `cargo run --release -p lockkit-etcd --example
//! etcd_cycle [-- ROUNDS]`.
//!
//! On one provider's client and lease, in interleaved rounds of 100 (ROUNDS rounds, 20 by
//! default), it times: etcd's own `Lock`+`Unlock`; lockkit's acquire+release; the two
//! transactions lockkit sends, sent raw (the put-if-absent that reads the queue, and the
//! delete conditioned on the create revision); and the leanest pair that does the same job
//! (a put-if-absent reading the first key only, and a plain delete), and lockkit's two
//! transactions with a new key name per cycle (as lockkit wrote them before its names were
//! reused) and with one name. The gap between
//! lockkit and its raw transactions is client work; the gap between the raw transactions and
//! `Lock` is server work. It starts a member from the test kit's fixture, or uses the server
//! `LOCKKIT_ETCD_URL` names. With `LOCKKIT_ETCD_METRICS=host:port` (the member's
//! `--listen-metrics-urls`, with `--metrics extensive`) it also prints the server's own time
//! per cycle of each kind, from etcd's `grpc_server_handling_seconds` sums and counts read
//! around each round, and splits lockkit's two transactions apart (each beside a plain put or
//! delete): what is server time and what is the client's. Figures: docs/PERFORMANCE.md.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, missing_docs)]

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lockkit_etcd::EtcdLockProvider;
use lockkit_etcd::etcd_client::{
    Compare, CompareOp, GetOptions, LockOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};
use lockkit_testkit::fixture::EtcdServer;
use support::{acquire_txn, release_txn};

/// Per gRPC method: the sum of seconds and the count of etcd's `grpc_server_handling_seconds`.
type ServerTimes = HashMap<String, (f64, f64)>;

/// The member's server times so far (empty without `LOCKKIT_ETCD_METRICS`).
fn scrape() -> ServerTimes {
    use std::io::{Read, Write};
    let mut out = HashMap::new();
    let Ok(addr) = std::env::var("LOCKKIT_ETCD_METRICS") else { return out };
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut body = String::new();
    stream.read_to_string(&mut body).unwrap();
    for line in body.lines() {
        for (suffix, idx) in [("grpc_server_handling_seconds_sum{", 0), ("grpc_server_handling_seconds_count{", 1)] {
            if let Some(rest) = line.strip_prefix(suffix) {
                let method = rest.split("grpc_method=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
                let value: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
                let e = out.entry(method).or_insert((0.0, 0.0));
                if idx == 0 { e.0 += value } else { e.1 += value }
            }
        }
    }
    out
}

/// Adds the server times since `before` to `acc`.
fn add_delta(acc: &mut ServerTimes, before: &ServerTimes) {
    for (m, (s, c)) in scrape() {
        let (s0, c0) = before.get(&m).copied().unwrap_or((0.0, 0.0));
        let e = acc.entry(m).or_insert((0.0, 0.0));
        e.0 += s - s0;
        e.1 += c - c0;
    }
}

fn p50(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::args().nth(1).map_or(20, |a| a.parse().expect("ROUNDS is a number"));
    // The environment's server when LOCKKIT_ETCD_URL names one, else one started for this run.
    let url = EtcdServer::shared().await.unwrap_or_else(|e| panic!("{e}")).url();
    let provider = EtcdLockProvider::connect(&url).await.unwrap();
    let mut client = provider.etcd_client().await.unwrap();
    let lease = provider.lease_id().await.unwrap();
    let name = format!("cycle-{}", std::process::id());
    let lock = provider.lock(&name).unwrap();
    let prefix = format!("{}/", provider.lock_prefix(&format!("{name}-raw")).unwrap());
    let owner = "lockkit1 67e55044-10b1-426f-9247-bb680e5fe0c8 somehost 4242 1700000000000";
    let lean_prefix = format!("{}/", provider.lock_prefix(&format!("{name}-lean")).unwrap());
    let one_prefix = format!("{}/", provider.lock_prefix(&format!("{name}-one")).unwrap());
    let queue = || GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend);
    let (mut service, mut lockkit, mut raw, mut lean) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut floor, mut txn_put, mut raw_one) = (Vec::new(), Vec::new(), Vec::new());
    let mut server: Vec<ServerTimes> = vec![Default::default(); 7];
    for round in 0..=rounds {
        // Round 0 warms up and is not kept.
        let keep = round > 0;
        let before = scrape();
        for _ in 0..100 {
            let start = Instant::now();
            let locked = client.lock(format!("{name}-service"), Some(LockOptions::new().with_lease(lease))).await;
            client.unlock(locked.unwrap().key().to_vec()).await.unwrap();
            if keep {
                service.push(start.elapsed());
            }
        }
        if keep {
            add_delta(&mut server[0], &before);
        }
        let before = scrape();
        for _ in 0..100 {
            let start = Instant::now();
            lock.acquire().await.unwrap().release().await.unwrap();
            if keep {
                lockkit.push(start.elapsed());
            }
        }
        if keep {
            add_delta(&mut server[1], &before);
        }
        let before = scrape();
        for i in 0..100 {
            let key = format!("{prefix}{round}-{i}");
            let void = format!("{prefix}-void/{round}-{i}");
            let start = Instant::now();
            let txn = acquire_txn(&key, &void, &prefix, owner, lease);
            let reply = client.txn(txn).await.unwrap();
            let rev = reply.header().unwrap().revision();
            let release = release_txn(key, rev);
            assert!(client.txn(release).await.unwrap().succeeded());
            if keep {
                raw.push(start.elapsed());
            }
        }
        if keep {
            add_delta(&mut server[2], &before);
        }
        let before = scrape();
        for i in 0..100 {
            let _ = i;
            let key = format!("{lean_prefix}{lease:x}");
            let start = Instant::now();
            let put = TxnOp::put(key.clone(), "", Some(PutOptions::new().with_lease(lease)));
            let first = queue().with_limit(1);
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([put, TxnOp::get(lean_prefix.clone(), Some(first.clone()))])
                .or_else([TxnOp::get(key.clone(), None), TxnOp::get(lean_prefix.clone(), Some(first))]);
            let reply = client.txn(txn).await.unwrap();
            assert!(matches!(reply.op_responses().last(), Some(TxnOpResponse::Get(_))));
            client.delete(key, None).await.unwrap();
            if keep {
                lean.push(start.elapsed());
            }
        }
        if keep {
            add_delta(&mut server[3], &before);
        }
        let before = scrape();
        for i in 0..100 {
            let key = format!("{one_prefix}{lease:x}");
            let void = format!("{one_prefix}-void/{round}-{i}");
            let start = Instant::now();
            let txn = acquire_txn(&key, &void, &one_prefix, owner, lease);
            let reply = client.txn(txn).await.unwrap();
            let rev = reply.header().unwrap().revision();
            let release = release_txn(key, rev);
            assert!(client.txn(release).await.unwrap().succeeded());
            if keep {
                raw_one.push(start.elapsed());
            }
        }
        if keep {
            add_delta(&mut server[4], &before);
        }
        let before = scrape();
        for i in 0..100 {
            let _ = i;
            let key = format!("{lean_prefix}floor");
            let start = Instant::now();
            client.put(key.clone(), "", Some(PutOptions::new().with_lease(lease))).await.unwrap();
            client.delete(key, None).await.unwrap();
            if keep {
                floor.push(start.elapsed());
            }
        }
        if keep {
            add_delta(&mut server[5], &before);
        }
        let before = scrape();
        for i in 0..100 {
            let _ = i;
            let key = format!("{lean_prefix}txn");
            let start = Instant::now();
            let put = TxnOp::put(key.clone(), "", Some(PutOptions::new().with_lease(lease)));
            let txn = Txn::new().when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)]).and_then([put]);
            client.txn(txn).await.unwrap();
            client.delete(key, None).await.unwrap();
            if keep {
                txn_put.push(start.elapsed());
            }
        }
        if keep {
            add_delta(&mut server[6], &before);
        }
    }
    // Server split: the acquire's transaction with a plain delete, and a plain put with the
    // release's transaction.
    let mut split: Vec<ServerTimes> = vec![Default::default(); 2];
    let mut split_wall: Vec<Vec<Duration>> = vec![Vec::new(); 4];
    for round in 0..rounds {
        let before = scrape();
        for i in 0..100 {
            let start = Instant::now();
            let key = format!("{one_prefix}{lease:x}");
            let void = format!("{one_prefix}-void/s{round}-{i}");
            let txn = acquire_txn(&key, &void, &one_prefix, owner, lease);
            client.txn(txn).await.unwrap();
            client.delete(key, None).await.unwrap();
            split_wall[0].push(start.elapsed());
        }
        add_delta(&mut split[0], &before);
        let before = scrape();
        for _ in 0..100 {
            let start = Instant::now();
            let key = format!("{one_prefix}{lease:x}");
            let reply = client.put(key.clone(), owner, Some(PutOptions::new().with_lease(lease))).await.unwrap();
            let rev = reply.header().unwrap().revision();
            let release = release_txn(key, rev);
            assert!(client.txn(release).await.unwrap().succeeded());
            split_wall[1].push(start.elapsed());
        }
        add_delta(&mut split[1], &before);
        for _ in 0..100 {
            let start = Instant::now();
            let locked = client.lock(format!("{name}-service"), Some(LockOptions::new().with_lease(lease))).await;
            client.unlock(locked.unwrap().key().to_vec()).await.unwrap();
            split_wall[2].push(start.elapsed());
        }
        // The least any lock can send whose release is conditioned on the key's create
        // revision: a put-if-absent that reads nothing, and that release.
        for _ in 0..100 {
            let start = Instant::now();
            let key = format!("{lean_prefix}minimal");
            let put = TxnOp::put(key.clone(), "", Some(PutOptions::new().with_lease(lease)));
            let txn = Txn::new().when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)]).and_then([put]);
            let rev = client.txn(txn).await.unwrap().header().unwrap().revision();
            assert!(client.txn(release_txn(key, rev)).await.unwrap().succeeded());
            split_wall[3].push(start.elapsed());
        }
    }
    for (i, acc) in split.iter().enumerate() {
        let mut methods: Vec<_> = acc.iter().filter(|(_, (_, c))| *c > 0.0).collect();
        methods.sort_by(|a, b| a.0.cmp(b.0));
        let detail: Vec<String> = methods
            .iter()
            .map(|(m, (s, c))| format!("{m} {:.1}us x{:.2}", s / c * 1e6, c / (rounds as f64 * 100.0)))
            .collect();
        println!("split {}: {}", ["acquire txn + delete", "put + release txn"][i], detail.join(", "));
    }
    let lock_wall = p50(&mut split_wall[2].clone());
    let kinds = [
        "acquire txn + bare delete",
        "put + release txn",
        "Lock+Unlock (split rounds)",
        "put-if-absent alone + release txn",
    ];
    for (i, what) in kinds.iter().enumerate() {
        let p = p50(&mut split_wall[i].clone());
        println!("split wall {what:30} p50 {p:>10.1?} {:.3}x Lock+Unlock", p.as_secs_f64() / lock_wall.as_secs_f64());
    }
    let early = p50(&mut lockkit[..500].to_vec());
    let late = p50(&mut lockkit[lockkit.len() - 500..].to_vec());
    let raw_early = p50(&mut raw[..500].to_vec());
    let raw_late = p50(&mut raw[raw.len() - 500..].to_vec());
    let service = p50(&mut service);
    println!(
        "lockkit: first 500 cycles p50 {early:.1?}, last 500 {late:.1?}; raw with a new key per cycle: {raw_early:.1?}, {raw_late:.1?}"
    );
    let names = ["Lock+Unlock", "lockkit", "raw new key", "lean", "raw one key", "floor", "txn_put"];
    for (i, acc) in server.iter().enumerate() {
        let mut methods: Vec<_> = acc.iter().filter(|(_, (_, c))| *c > 0.0).collect();
        methods.sort_by(|a, b| a.0.cmp(b.0));
        let per_cycle: f64 = acc.values().map(|(s, _)| s).sum::<f64>() / (rounds as f64 * 100.0) * 1e6;
        let detail: Vec<String> = methods
            .iter()
            .map(|(m, (s, c))| format!("{m} {:.1}us x{:.2}", s / c * 1e6, c / (rounds as f64 * 100.0)))
            .collect();
        println!("server {:12} {per_cycle:7.1} us/cycle: {}", names[i], detail.join(", "));
    }
    for (what, samples) in [
        ("etcd's Lock+Unlock", &mut vec![service]),
        ("lockkit acquire+release", &mut lockkit),
        ("lockkit's two transactions, raw, new key", &mut raw),
        ("lockkit's two transactions, raw, one key", &mut raw_one),
        ("Lock's txn and delete, raw, one key", &mut lean),
        ("put-if-absent alone + delete, one key", &mut txn_put),
        ("put + delete (the floor), one key", &mut floor),
    ] {
        let p = p50(samples);
        println!("{what:40} p50 {p:>10.1?}  {:.3}x Lock+Unlock", p.as_secs_f64() / service.as_secs_f64());
    }
}
