//! `lockkit break NAME`: frees a lock whose holder is stuck, after showing who holds it and
//! asking for confirmation on a terminal (or with `--yes`).

use std::io::{IsTerminal, Write};
use std::time::SystemTime;

use lockkit::backend::{HolderInfo, LockInfo};

use crate::cli::BreakArgs;
use crate::exit::{self, Code, Failure};
use crate::status;
use crate::target::Target;

/// Runs `lockkit break`: 0 when the lock was broken, [`exit::NOTHING_TO_BREAK`] when nobody
/// held it, [`exit::DECLINED`] when the confirmation was declined or the lock changed hands
/// while the person answered.
pub(crate) async fn break_lock(args: BreakArgs) -> Result<Code, Failure> {
    let target = Target::resolve(args.url);
    let provider = target.connect(&args.name, false).await?;
    let what = format!("lock {:?} on {}", args.name, target.shown());
    let info = provider
        .inspect(&args.name)
        .await
        .map_err(|error| Failure::from_lock_error(&error, &format!("cannot read {what}")))?;
    if info.holder().is_none() {
        println!("nothing to break: {what} is free");
        return Ok(exit::NOTHING_TO_BREAK);
    }
    println!("{}", status::human_report(&args.name, target.shown(), &info, SystemTime::now()));
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::new(
                exit::USAGE,
                format!(
                    "not breaking {what}: there is no terminal to confirm on; pass --yes to break it without asking"
                ),
            ));
        }
        if !confirm(&what).await? {
            println!("not broken: {what} is left to its holder");
            return Ok(exit::DECLINED);
        }
        // A person may take a while to answer: break only the holds they were shown, not a
        // new owner's that took the lock meanwhile (the window left is one round trip).
        let now = provider
            .inspect(&args.name)
            .await
            .map_err(|error| Failure::from_lock_error(&error, &format!("cannot read {what}")))?;
        if tokens(&now) != tokens(&info) {
            println!("{}", status::human_report(&args.name, target.shown(), &now, SystemTime::now()));
            println!(
                "not broken: {what} changed hands while you answered; the holder is now as above (run lockkit break again to break it)"
            );
            return Ok(exit::DECLINED);
        }
    }
    let broken = provider
        .break_lock(&args.name)
        .await
        .map_err(|error| Failure::from_lock_error(&error, &format!("cannot break {what}")))?;
    if broken.is_empty() {
        println!("nothing to break: {what} was released meanwhile");
        return Ok(exit::NOTHING_TO_BREAK);
    }
    let shown: Vec<_> = info.holders.iter().map(|holder| holder.token).collect();
    for holder in &broken {
        println!("broke:   {}", describe(holder));
    }
    if broken.iter().any(|holder| !shown.contains(&holder.token)) {
        println!("note:    the lock changed hands after it was shown; the holds above are the ones broken");
    }
    let highest = broken.iter().map(|holder| holder.token).max().map_or(0, lockkit::FencingToken::get);
    println!(
        "{what} is free: the next owner's token is greater than {highest}; a broken holder learns of it at its next renewal or check and its writes with its old token can be refused"
    );
    Ok(0)
}

/// The tokens of a lock's holders, in a stable order.
fn tokens(info: &LockInfo) -> Vec<lockkit::FencingToken> {
    let mut tokens: Vec<_> = info.holders.iter().map(|holder| holder.token).collect();
    tokens.sort_unstable();
    tokens
}

/// "token 17 (exclusive) pid 4242 on build-7 (attempt …)".
fn describe(holder: &HolderInfo) -> String {
    format!("token {} ({}) {}", holder.token, status::kind_word(&holder.kind), holder.owner)
}

/// Asks on the terminal; `true` for "y" or "yes".
async fn confirm(what: &str) -> Result<bool, Failure> {
    let question = format!("Break {what}? Its holder loses it, and another owner may take it. [y/N] ");
    let answer = tokio::task::spawn_blocking(move || {
        let mut stderr = std::io::stderr();
        let _ = stderr.write_all(question.as_bytes());
        let _ = stderr.flush();
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await;
    match answer {
        Ok(Ok(line)) => Ok(matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes")),
        Ok(Err(error)) => {
            Err(Failure::new(exit::OS_ERROR, format!("cannot read the answer from the terminal: {error}")))
        }
        Err(error) => Err(Failure::new(exit::OS_ERROR, format!("cannot read the answer from the terminal: {error}"))),
    }
}
