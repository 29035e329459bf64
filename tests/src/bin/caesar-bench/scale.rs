//! Scale figures (issue 33, item 3).
//!
//! `--store-tasks N`: a store holding N ended tasks (one real task, delegated
//! and ended through the daemon, then copied N times in one transaction with
//! the daemon stopped: ids, creation times and objectives of their own, its
//! report and events each), then, the daemon started again on it: its start
//! (until it answers Ping), the time from its spawn to its first answered
//! `caesar ps` and its peak RSS by then, its idle RSS, and `--runs` timings
//! of `caesar ps`, `caesar ps --all`, `caesar status <id>` (whole processes) and the dashboard's first paint
//! (its page and `/api/tasks`, over HTTP with a logged-in session).
//!
//! `--at-once N`: N tasks delegated at once from 10 clients (each its own
//! connection, N/10 delegations in turn), `max_parallel = N`: the time until
//! all N agents have started (each stamps a file), the daemon's peak RSS, and
//! the time until all N reports are in.
//!
//! `--read-only-tree N`: a committed repository of N files (100 to a
//! directory) and an agent that reports and exits: `--runs` timings of
//! `caesar run --mode read-only --isolation inplace` from it (whole
//! processes), at the repository's root (the box keeps the task out of the
//! tree: no snapshot, changes verified by `kernel`) and from a project that
//! a `.caesar` marks in a subdirectory of it (the repository's two snapshots
//! taken, verified by `git`; issue 33).

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use caesar_proto::pb;
use caesar_tests::bench::{BenchDaemon, git};

use super::{Figure, print_table, proc_kb};

/// One HTTP/1.1 request to the dashboard on 127.0.0.1; (status, headers, body).
fn http(port: u16, path: &str, cookie: Option<&str>) -> std::io::Result<(u16, String, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let cookie = cookie.map(|c| format!("Cookie: {c}\r\n")).unwrap_or_default();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n{cookie}\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((status, head.to_owned(), body.to_owned()))
}

fn project(bin_dir: &Path, dir: &Path, policy: &str, agent_args: &str) -> Result<(), Box<dyn std::error::Error>> {
    let f = bin_dir.join("fake-agent").display().to_string();
    std::fs::create_dir_all(dir.join(".caesar"))?;
    std::fs::write(
        dir.join(".caesar/config.toml"),
        format!("{policy}[[agent]]\nid = \"quick\"\nbin = {f:?}\nargs = [{agent_args}]\nnative_read_only = true\n"),
    )?;
    std::fs::write(dir.join("README.md"), "x\n")?;
    for args in [&["init", "-q"][..], &["add", "-A"], &["commit", "-qm", "i"]] {
        git(dir, args)?;
    }
    Ok(())
}

/// Copies task `template` (its row, report and events) `n` times in one transaction.
fn fill(db: &Path, template: &str, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let mut conn = rusqlite::Connection::open(db)?;
    let columns = |conn: &rusqlite::Connection, table: &str| -> rusqlite::Result<Vec<String>> {
        let mut st = conn.prepare(&format!("PRAGMA table_info({table})"))?;
        let rows = st.query_map([], |r| r.get::<_, String>(1))?;
        rows.collect()
    };
    let copy = |table: &str, key: &str, conn: &rusqlite::Connection| -> rusqlite::Result<String> {
        let cols = columns(conn, table)?;
        let picked: Vec<String> = cols
            .iter()
            .map(|c| match c.as_str() {
                c if c == key => "?1".to_owned(),
                "created_ms" if table == "tasks" => "created_ms - ?2".to_owned(),
                "objective" => "objective || ' ' || ?1".to_owned(),
                other => other.to_owned(),
            })
            .collect();
        Ok(format!(
            "INSERT INTO {table} ({}) SELECT {} FROM {table} WHERE {key} = ?3",
            cols.join(", "),
            picked.join(", ")
        ))
    };
    let tx = conn.transaction()?;
    let tasks = copy("tasks", "id", &tx)?;
    let reports = copy("reports", "task_id", &tx)?;
    let events = copy("events", "task_id", &tx)?;
    {
        let (mut t, mut r, mut e) = (tx.prepare(&tasks)?, tx.prepare(&reports)?, tx.prepare(&events)?);
        for i in 0..n {
            let id = format!("t_f{i:011x}");
            // Older than the template, a second apart.
            let back = (i as i64 + 1) * 1000;
            t.execute(rusqlite::params![id, back, template])?;
            r.execute(rusqlite::params![id, back, template])?;
            e.execute(rusqlite::params![id, back, template])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// Times `caesar <args>` as a whole process, `runs` times.
fn time_cli(
    bin_dir: &Path,
    envs: &[(&str, String)],
    args: &[&str],
    name: &'static str,
    runs: usize,
) -> Result<Figure, Box<dyn std::error::Error>> {
    let mut f = Figure::new(name, "≤ 100 ms");
    for _ in 0..runs {
        let started = Instant::now();
        let out = Command::new(bin_dir.join("caesar")).args(args).envs(envs.iter().map(|(k, v)| (*k, v))).output()?;
        if !out.status.success() {
            return Err(format!("caesar {args:?} failed: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        f.samples.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(f)
}

pub async fn store_figures(bin_dir: &Path, n: usize, runs: usize) -> Result<(), Box<dyn std::error::Error>> {
    let home = tempfile::Builder::new().prefix("cb").tempdir_in("/tmp")?;
    let proj = tempfile::tempdir()?;
    std::fs::create_dir_all(home.path().join("files"))?;
    project(bin_dir, proj.path(), "", "\"report\", \"success\", \"ok\"")?;
    let envs = [
        ("CAESAR_HOME", home.path().display().to_string()),
        ("CAESAR_LOG", "warn".to_owned()),
        ("CAESAR_TRUST_PREFIX", std::env::temp_dir().display().to_string()),
    ];
    let daemon = BenchDaemon::start(bin_dir, home.path(), "warn", &[]).await?;
    let mut c = daemon.client.clone();
    let d = c
        .delegate(pb::DelegateRequest {
            objective: "the template".into(),
            agent: "quick".into(),
            workspace: proj.path().display().to_string(),
            mode: "read-only".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    c.r#await(pb::AwaitRequest { task_ids: vec![d.task_id.clone()], timeout_ms: 30_000, wake_on_attention: false })
        .await?;
    daemon.stop().await;
    let db = home.path().join("state/caesar.db");
    let filling = Instant::now();
    fill(&db, &d.task_id, n)?;
    let fill_s = filling.elapsed().as_secs_f64();
    let db_mb = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0) as f64 / 1e6;

    let starting = Instant::now();
    let daemon = BenchDaemon::start(bin_dir, home.path(), "warn", &[]).await?;
    let start_ms = starting.elapsed().as_secs_f64() * 1000.0;
    // The first call answered after the start (a whole `caesar ps`), and the peak RSS up to it.
    time_cli(bin_dir, &envs, &["ps"], "first call", 1)?;
    let first_ms = starting.elapsed().as_secs_f64() * 1000.0;
    let start_peak_mb = proc_kb(daemon.pid(), "VmHWM:") as f64 / 1024.0;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_mb = proc_kb(daemon.pid(), "VmRSS:") as f64 / 1024.0;

    let mut figures = vec![
        time_cli(bin_dir, &envs, &["ps"], "`caesar ps` (process)", runs)?,
        time_cli(bin_dir, &envs, &["ps", "--all"], "`caesar ps --all` (process)", runs)?,
        time_cli(bin_dir, &envs, &["status", &d.task_id], "`caesar status <id>` (process)", runs)?,
        time_cli(bin_dir, &envs, &["status", "t_f00000000000"], "`caesar status <id>`, a copied task (process)", runs)?,
    ];
    // The dashboard: logged in once, then its first paint (the page and the list).
    let out = Command::new(bin_dir.join("caesar"))
        .args(["--json", "ui", "--no-open"])
        .envs(envs.iter().map(|(k, v)| (*k, v)))
        .output()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let url = v["login_url"].as_str().ok_or("caesar ui gave no login_url")?.to_owned();
    let rest = url.strip_prefix("http://127.0.0.1:").ok_or("login_url not on 127.0.0.1")?;
    let (port, path) = rest.split_once('/').ok_or("login_url has no path")?;
    let port: u16 = port.parse()?;
    let (_, head, _) = http(port, &format!("/{path}"), None)?;
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: ").or_else(|| l.strip_prefix("Set-Cookie: ")))
        .and_then(|c| c.split(';').next())
        .ok_or("the login set no cookie")?
        .to_owned();
    let mut paint = Figure::new("dashboard first paint: `/` + `/api/tasks`", "≤ 100 ms");
    let mut list_bytes = 0;
    for _ in 0..runs {
        let started = Instant::now();
        let (s1, _, _) = http(port, "/", Some(&cookie))?;
        let (s2, _, body) = http(port, "/api/tasks", Some(&cookie))?;
        paint.samples.push(started.elapsed().as_secs_f64() * 1000.0);
        if s1 != 200 || s2 != 200 {
            return Err(format!("the dashboard answered {s1} and {s2}").into());
        }
        list_bytes = body.len();
    }
    let peak_mb = proc_kb(daemon.pid(), "VmHWM:") as f64 / 1024.0;
    println!(
        "caesar-bench --store-tasks {n}: store {db_mb:.0} MB filled in {fill_s:.1} s; daemon started (answers Ping) in \
         {start_ms:.0} ms, its first `caesar ps` answered {first_ms:.0} ms after the spawn, peak RSS by then \
         {start_peak_mb:.1} MB; idle RSS {idle_mb:.1} MB, peak RSS {peak_mb:.1} MB; /api/tasks {list_bytes} bytes"
    );
    figures.push(paint);
    print_table("figure", &mut figures);
    daemon.stop().await;
    Ok(())
}

pub async fn at_once_figures(bin_dir: &Path, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let home = tempfile::Builder::new().prefix("cb").tempdir_in("/tmp")?;
    let proj = tempfile::tempdir()?;
    let files = home.path().join("files");
    std::fs::create_dir_all(&files)?;
    let stamp = files.join("stamp");
    let s = stamp.display().to_string();
    project(
        bin_dir,
        proj.path(),
        &format!("[policy]\nmax_parallel = {n}\n"),
        &format!("\"stamp\", {s:?}, \"report\", \"success\", \"ok\""),
    )?;
    let daemon = BenchDaemon::start(bin_dir, home.path(), "warn", &[("CAESAR_MAX_PENDING", "100000")]).await?;
    let pid = daemon.pid();
    tokio::time::sleep(Duration::from_millis(500)).await;
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")?;
    let workspace = proj.path().display().to_string();
    let paths = caesar_proto::paths::Paths::under(home.path());
    let started = Instant::now();
    let clients = 10usize;
    let mut calls = Vec::new();
    for k in 0..clients {
        // A connection of its own per client.
        let (channel, _) = caesar_proto::client::connect_channel(&paths).await.map_err(|e| e.to_string())?;
        let mut c = caesar_proto::pb::caesar_client::CaesarClient::new(channel);
        let workspace = workspace.clone();
        let count = n / clients + usize::from(k < n % clients);
        calls.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..count {
                let r = c
                    .delegate(pb::DelegateRequest {
                        objective: format!("at once {k}/{i}"),
                        agent: "quick".into(),
                        workspace: workspace.clone(),
                        mode: "read-only".into(),
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                ids.push(r.into_inner().task_id);
            }
            Ok::<_, String>((c, ids))
        }));
    }
    let mut ids = Vec::new();
    let mut client = None;
    for call in calls {
        let (c, mut some) = call.await??;
        ids.append(&mut some);
        client = Some(c);
    }
    let delegated = started.elapsed();
    let stamps = || std::fs::read_to_string(&stamp).map(|t| t.lines().count()).unwrap_or(0);
    while stamps() < n && started.elapsed() < Duration::from_secs(120) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let all_started = started.elapsed();
    let started_peak_mb = proc_kb(pid, "VmHWM:") as f64 / 1024.0;
    let mut c = client.ok_or("no client")?;
    for chunk in ids.chunks(1000) {
        c.r#await(pb::AwaitRequest { task_ids: chunk.to_vec(), timeout_ms: 600_000, wake_on_attention: false }).await?;
    }
    let all_done = started.elapsed();
    let peak_mb = proc_kb(pid, "VmHWM:") as f64 / 1024.0;
    println!(
        "caesar-bench --at-once {n} ({clients} clients): all delegated {:.0} ms, all {} agents started {:.0} ms, \
         all ended {:.0} ms, daemon peak RSS {started_peak_mb:.1} MB by the last start, {peak_mb:.1} MB by the end",
        delegated.as_secs_f64() * 1000.0,
        stamps(),
        all_started.as_secs_f64() * 1000.0,
        all_done.as_secs_f64() * 1000.0
    );
    daemon.stop().await;
    Ok(())
}

pub async fn read_only_tree_figures(bin_dir: &Path, n: usize, runs: usize) -> Result<(), Box<dyn std::error::Error>> {
    let home = tempfile::Builder::new().prefix("cb").tempdir_in("/tmp")?;
    let proj = tempfile::tempdir()?;
    std::fs::create_dir_all(home.path().join("files"))?;
    for i in 0..n {
        let dir = proj.path().join(format!("src/d{}", i / 100));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(format!("f{i}.txt")), format!("file {i}\n").repeat(5))?;
    }
    project(bin_dir, proj.path(), "", "\"report\", \"success\", \"looked\"")?;
    let envs = [
        ("CAESAR_HOME", home.path().display().to_string()),
        ("CAESAR_LOG", "warn".to_owned()),
        ("CAESAR_TRUST_PREFIX", std::env::temp_dir().display().to_string()),
    ];
    // The same repository, the project a `.caesar` in a subdirectory of it:
    // the box protects the project, and the repository's snapshots are taken.
    let sub = proj.path().join("sub");
    std::fs::create_dir_all(sub.join(".caesar"))?;
    std::fs::copy(proj.path().join(".caesar/config.toml"), sub.join(".caesar/config.toml"))?;
    let daemon = BenchDaemon::start(bin_dir, home.path(), "warn", &[]).await?;
    let args = ["--json", "run", "--agent", "quick", "--mode", "read-only", "--isolation", "inplace", "look"];
    let mut figures = Vec::new();
    for (dir, name) in [
        (proj.path(), "`caesar run` read-only, inplace, at the repository's root (process)"),
        (sub.as_path(), "`caesar run` read-only, inplace, from a project in a subdirectory (process)"),
    ] {
        let mut f = Figure::new(name, "-");
        let mut verified_by = String::new();
        for _ in 0..runs {
            let started = Instant::now();
            let out = Command::new(bin_dir.join("caesar"))
                .args(args)
                .current_dir(dir)
                .envs(envs.iter().map(|(k, v)| (*k, v)))
                .output()?;
            f.samples.push(started.elapsed().as_secs_f64() * 1000.0);
            if !out.status.success() {
                return Err(format!("caesar run failed: {}", String::from_utf8_lossy(&out.stderr)).into());
            }
            let text = String::from_utf8_lossy(&out.stdout);
            let at = text.find("\"changes_verified_by\"").ok_or("the report has no changes_verified_by")?;
            verified_by = text[at..].split('"').nth(3).unwrap_or_default().to_owned();
        }
        println!("{name}: the changes verified by `{verified_by}`");
        figures.push(f);
    }
    println!("caesar-bench --read-only-tree {n}");
    print_table("figure", &mut figures);
    daemon.stop().await;
    Ok(())
}
