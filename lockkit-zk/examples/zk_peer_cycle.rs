//! lockkit's uncontended ZooKeeper cycle beside Curator's, in one run on one server:
//! `cargo run --release -p lockkit-zk --example zk_peer_cycle [-- ROUNDS [CYCLES]]`.
//!
//! Starts a durable standalone ZooKeeper from the test kit's fixture (or uses
//! `LOCKKIT_ZK_ADDR`), compiles the Curator peer (`examples/peers/CuratorCycle.java`) with
//! `javac` against Debian's Curator jars, and runs ROUNDS rounds (default 10) of CYCLES
//! acquire+release cycles (default 300) of each, in an order that alternates from round to
//! round so that both see the same load. Each side has its own session; both are warmed up
//! first (connections, the JVM's JIT, containers). Prints p50 and p99 of each side over all
//! rounds, the ratio lockkit ÷ Curator, and the p50 of each round.
//!
//! lockkit's cycles run in a task of a multi-threaded runtime, where an application's code
//! runs; `--block-on` runs them in the runtime's `block_on` instead (the calling thread, which
//! is not one of the runtime's workers), the way a `#[tokio::main]` body does.
//!
//! Needs `java`, `javac` and the Curator jars: `apt-get install default-jdk-headless
//! libcurator-recipes-java libcurator-framework-java libcurator-client-java` (Debian); the
//! example says which is missing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use lockkit_testkit::fixture::zk::ZkServer;
use lockkit_zk::ZkLockProvider;

/// Where Debian puts the jars.
const JAR_DIR: &str = "/usr/share/java";
/// The Curator jars the peer needs; their manifests name the rest (ZooKeeper, Guava, slf4j).
const CURATOR_JARS: [&str; 3] = ["curator-recipes.jar", "curator-framework.jar", "curator-client.jar"];
/// How to install what is missing.
const INSTALL_HINT: &str = "install a JDK and Curator: apt-get install default-jdk-headless \
    libcurator-recipes-java libcurator-framework-java libcurator-client-java";
/// Warm-up cycles of each side before the measured rounds.
const WARM_UP: usize = 1000;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let block_on = args.iter().any(|arg| arg == "--block-on");
    args.retain(|arg| arg != "--block-on");
    let number = |index: usize, default: usize, what: &str| match args.get(index) {
        None => default,
        Some(arg) => arg.parse().unwrap_or_else(|_| {
            eprintln!(
                "zk_peer_cycle: {what} must be a number, not {arg:?}: zk_peer_cycle [ROUNDS [CYCLES]] [--block-on]"
            );
            std::process::exit(2)
        }),
    };
    let rounds = number(0, 10, "ROUNDS");
    let cycles = number(1, 300, "CYCLES");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let measured = async move { measure(rounds, cycles, block_on).await };
    let result = if block_on { runtime.block_on(measured) } else { runtime.block_on(runtime.spawn(measured)).unwrap() };
    if let Err(message) = result {
        eprintln!("zk_peer_cycle: {message}");
        std::process::exit(1);
    }
}

async fn measure(rounds: usize, cycles: usize, block_on: bool) -> Result<(), String> {
    let classpath = classpath()?;
    let classes = compile_peer(&classpath)?;
    let (_server, connect) = match std::env::var("LOCKKIT_ZK_ADDR") {
        Ok(addr) if !addr.is_empty() => (None, addr),
        _ => {
            let server = ZkServer::start_durable().await.map_err(|e| format!("cannot start ZooKeeper: {e}"))?;
            let connect = server.connect_string();
            (Some(server), connect)
        }
    };
    let run = uuid_like();
    let provider = ZkLockProvider::connect(&format!("zk://{connect}/lockkit-peer-cycle-{run}"))
        .await
        .map_err(|e| format!("lockkit cannot connect: {e}"))?;
    let lock = provider.lock("cycle").map_err(|e| e.to_string())?;
    let mut curator = Curator::start(&classpath, &classes, &connect, &format!("/curator-peer-cycle-{run}/cycle"))?;

    let lockkit_round = |count: usize| {
        let lock = lock.clone();
        async move {
            let mut times = Vec::with_capacity(count);
            for _ in 0..count {
                let start = Instant::now();
                lock.acquire().await.map_err(|e| e.to_string())?.release().await.map_err(|e| e.to_string())?;
                times.push(start.elapsed());
            }
            Ok::<_, String>(times)
        }
    };
    lockkit_round(WARM_UP).await?;
    curator = curator.round(WARM_UP).await?.0;

    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let mut per_round = Vec::new();
    for round in 0..rounds {
        let (lk, cu) = if round % 2 == 0 {
            let lk = lockkit_round(cycles).await?;
            let (next, cu) = curator.round(cycles).await?;
            curator = next;
            (lk, cu)
        } else {
            let (next, cu) = curator.round(cycles).await?;
            curator = next;
            (lockkit_round(cycles).await?, cu)
        };
        per_round.push((percentile(&lk, 0.5), percentile(&cu, 0.5)));
        ours.extend(lk);
        theirs.extend(cu);
    }
    curator.stop();

    let (p50, p99) = (percentile(&ours, 0.5), percentile(&ours, 0.99));
    let (c50, c99) = (percentile(&theirs, 0.5), percentile(&theirs, 0.99));
    let place = if block_on { "in block_on" } else { "in a runtime task" };
    println!("uncontended cycle (acquire+release), {rounds} rounds of {cycles}, server {connect}");
    println!("{:<34} {:>9} {:>9}", "", "p50 µs", "p99 µs");
    println!("{:<34} {:>9.1} {:>9.1}", format!("lockkit ({place})"), p50, p99);
    println!("{:<34} {:>9.1} {:>9.1}", "Curator 5.4 InterProcessMutex", c50, c99);
    println!("{:<34} {:>9.3} {:>9.3}", "lockkit ÷ Curator", p50 / c50, p99 / c99);
    let rounds: Vec<String> = per_round.iter().map(|(ours, theirs)| format!("{ours:.0}/{theirs:.0}")).collect();
    println!("p50 per round (lockkit/Curator): {}", rounds.join(" "));
    Ok(())
}

/// The `q` quantile of `times`, in µs.
fn percentile(times: &[Duration], q: f64) -> f64 {
    let mut sorted: Vec<Duration> = times.to_vec();
    sorted.sort_unstable();
    let at = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(at).map_or(f64::NAN, |time| time.as_secs_f64() * 1e6)
}

/// A name part that differs from run to run.
fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    format!("{:x}-{}", nanos, std::process::id())
}

/// The Curator jars' class path, or what to install.
fn classpath() -> Result<String, String> {
    let missing: Vec<&str> =
        CURATOR_JARS.iter().copied().filter(|jar| !Path::new(JAR_DIR).join(jar).exists()).collect();
    if !missing.is_empty() {
        return Err(format!("missing {} in {JAR_DIR}: {INSTALL_HINT}", missing.join(", ")));
    }
    Ok(CURATOR_JARS.iter().map(|jar| format!("{JAR_DIR}/{jar}")).collect::<Vec<_>>().join(":"))
}

/// Compiles the peer into a fresh directory; its path.
fn compile_peer(classpath: &str) -> Result<PathBuf, String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/peers/CuratorCycle.java");
    let out = std::env::temp_dir().join(format!("lockkit-curator-peer-{}", std::process::id()));
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let status = Command::new("javac")
        .arg("-d")
        .arg(&out)
        .args(["-cp", classpath])
        .arg(&source)
        .status()
        .map_err(|e| format!("cannot run javac ({e}): {INSTALL_HINT}"))?;
    if !status.success() {
        return Err(format!("javac failed on {} ({status})", source.display()));
    }
    Ok(out)
}

/// The running Curator peer: a JVM that runs rounds of cycles on request.
struct Curator {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
    classes: PathBuf,
}

impl Curator {
    fn start(classpath: &str, classes: &Path, connect: &str, path: &str) -> Result<Self, String> {
        let mut child = Command::new("java")
            .args(["-cp", &format!("{}:{classpath}", classes.display()), "CuratorCycle", connect, path])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run java ({e}): {INSTALL_HINT}"))?;
        let input = child.stdin.take().ok_or("no stdin to the peer")?;
        let mut output = BufReader::new(child.stdout.take().ok_or("no stdout from the peer")?);
        let mut line = String::new();
        output.read_line(&mut line).map_err(|e| format!("the Curator peer: {e}"))?;
        if line.trim() != "ready" {
            let _ = child.kill();
            return Err(format!("the Curator peer did not start (it said {line:?})"));
        }
        Ok(Self { child, input, output, classes: classes.to_owned() })
    }

    /// Runs `count` cycles in the JVM (on a blocking thread, so the runtime's workers stay free).
    async fn round(mut self, count: usize) -> Result<(Self, Vec<Duration>), String> {
        tokio::task::spawn_blocking(move || {
            writeln!(self.input, "{count}").map_err(|e| format!("the Curator peer: {e}"))?;
            let mut line = String::new();
            self.output.read_line(&mut line).map_err(|e| format!("the Curator peer: {e}"))?;
            let times: Result<Vec<Duration>, _> =
                line.split_whitespace().map(|micros| micros.parse().map(Duration::from_micros)).collect();
            let times = times.map_err(|e| format!("the Curator peer answered {line:?}: {e}"))?;
            if times.len() != count {
                return Err(format!("the Curator peer ran {} cycles, not {count}", times.len()));
            }
            Ok((self, times))
        })
        .await
        .map_err(|e| e.to_string())?
    }

    fn stop(mut self) {
        let _ = writeln!(self.input, "0");
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.classes);
    }
}
