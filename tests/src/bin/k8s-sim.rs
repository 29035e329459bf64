//! `k8s-sim`: the Kubernetes API simulator (see `caesar_tests::k8s_sim`) as
//! a process, so a test can restart the daemon while the "cluster" keeps
//! running. Binds 127.0.0.1 only, writes its port to `--port-file`, and
//! stops by itself when its stdin closes (its parent went away), killing
//! every pod process it started.
//!
//! Usage: k8s-sim --state-dir DIR --port-file FILE [--namespace NS]...
//!        [--forbid VERB:RESOURCE]... [--path PATH] [--secret NAME:KEY=VALUE]...
//!        [--kubelet light]

use std::io::Read;
use std::sync::Arc;

use caesar_tests::k8s_sim::{Sim, SimConfig, api, kubelet};

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut cfg = SimConfig { path: std::env::var("PATH").unwrap_or_default(), ..Default::default() };
    let mut port_file = None;
    let mut i = 0;
    while i < argv.len() {
        let v = argv.get(i + 1).cloned().unwrap_or_default();
        match argv[i].as_str() {
            "--state-dir" => cfg.state_dir = v.into(),
            "--port-file" => port_file = Some(v),
            "--namespace" => {
                cfg.namespaces.insert(v);
            }
            "--forbid" => {
                cfg.forbidden.insert(v);
            }
            "--path" => cfg.path = v,
            "--split-at" => cfg.split_at = v.parse().unwrap_or(0),
            "--kubelet" => cfg.light = v == "light",
            "--secret" => {
                if let Some((name, kv)) = v.split_once(':')
                    && let Some((k, val)) = kv.split_once('=')
                {
                    cfg.secrets.entry(name.to_owned()).or_default().insert(k.to_owned(), val.to_owned());
                }
            }
            other => {
                eprintln!("k8s-sim: unknown argument {other}");
                std::process::exit(2);
            }
        }
        i += 2;
    }
    if cfg.namespaces.is_empty() {
        cfg.namespaces.insert("default".to_owned());
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async move {
        let sim = Sim::new(cfg);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1");
        let port = listener.local_addr().expect("addr").port();
        if let Some(f) = port_file {
            let tmp = format!("{f}.tmp");
            std::fs::write(&tmp, port.to_string()).expect("port file");
            std::fs::rename(&tmp, &f).expect("port file");
        }
        eprintln!("k8s-sim: listening on 127.0.0.1:{port}");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let mut sink = [0u8; 256];
            while std::io::stdin().read(&mut sink).is_ok_and(|n| n > 0) {}
            let _ = tx.send(());
        });
        let stopper: Arc<Sim> = sim.clone();
        let app = api::router(sim);
        let serve = axum::serve(listener, app);
        tokio::select! {
            r = serve => { if let Err(e) = r { eprintln!("k8s-sim: {e}"); } }
            _ = rx => {}
        }
        kubelet::kill_all(&stopper);
    });
}
