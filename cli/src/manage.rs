//! The commands that look after caesar itself: `caesar daemon …` (start,
//! stop, service files, logs), `caesar agents …` and `caesar doctor`.

use super::*;

pub(crate) async fn daemon(action: DaemonAction, json: bool) -> Result<u8, Failure> {
    let paths = Paths::from_env().map_err(anyhow::Error::from)?;
    match action {
        DaemonAction::Start => {
            let _ = connect().await?;
            let (_, ping) = client::connect(&paths).await.map_err(anyhow::Error::from)?;
            if json {
                println!("{}", render::ping_json(&ping));
            } else {
                println!("caesard {} running (pid {}) at {}", ping.version, ping.pid, ping.socket);
            }
            Ok(0)
        }
        DaemonAction::Stop { cancel_tasks } => {
            let Ok((mut c, _)) = client::connect(&paths).await else {
                if json {
                    println!("{}", json!({"running": false}));
                } else {
                    println!("caesard is not running");
                }
                return Ok(0);
            };
            let r = c
                .shutdown(pb::ShutdownRequest { cancel_tasks, only_if_idle: false })
                .await
                .map_err(anyhow::Error::from)?
                .into_inner();
            client::wait_until_gone(&paths, std::time::Duration::from_secs(10)).await;
            if json {
                println!("{}", json!({"stopped": r.stopping, "active_tasks": r.active_tasks}));
            } else if r.active_tasks > 0 && !cancel_tasks {
                println!(
                    "caesard stopped; {} task(s) keep running and will be picked up by the next daemon",
                    r.active_tasks
                );
            } else {
                println!("caesard stopped");
            }
            Ok(0)
        }
        DaemonAction::Install { dry_run } | DaemonAction::Uninstall { dry_run } => {
            let uninstall = matches!(action, DaemonAction::Uninstall { .. });
            let done = service::install(&client::daemon_binary(), &paths.daemon_log(), dry_run, uninstall)?;
            if json {
                println!("{}", json!({"dry_run": dry_run, "steps": done}));
            } else {
                for line in done {
                    println!("{line}");
                }
            }
            Ok(0)
        }
        DaemonAction::Logs { lines } => {
            let tail = service::log_tail(&paths.daemon_log(), lines)?;
            if json {
                println!("{}", json!({ "lines": tail }));
            } else {
                for l in tail {
                    println!("{l}");
                }
            }
            Ok(0)
        }
        DaemonAction::Status => match client::connect(&paths).await {
            Ok((mut c, ping)) => {
                let health = c
                    .health(pb::HealthRequest { workspace: cwd_string() })
                    .await
                    .map_err(anyhow::Error::from)?
                    .into_inner();
                if json {
                    let mut v = render::ping_json(&ping);
                    v["store_ok"] = json!(health.store_ok);
                    v["problems"] = json!(health.problems);
                    println!("{v}");
                } else {
                    for p in &health.problems {
                        println!("PROBLEM: {p}");
                    }
                    println!(
                        "caesard {} running (pid {}, API protocol {}), {} active task(s)\nsocket: {}\nstate:  {}",
                        ping.version, ping.pid, ping.protocol, ping.active_tasks, ping.socket, ping.state_dir
                    );
                }
                Ok(0)
            }
            Err(_) => {
                if json {
                    println!("{}", json!({"running": false, "socket": paths.socket}));
                } else {
                    println!("caesard is not running (socket {})", paths.socket.display());
                }
                Ok(3)
            }
        },
    }
}

pub(crate) async fn agents(action: AgentsAction, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    match action {
        AgentsAction::List => {
            let r = c
                .list_agents(pb::ListAgentsRequest { workspace: cwd_string() })
                .await
                .map_err(anyhow::Error::from)?
                .into_inner();
            if json {
                let agents: Vec<Value> = r.agents.iter().map(render::agent_json).collect();
                println!("{}", json!({ "agents": agents, "warnings": r.warnings }));
            } else {
                render::print_agents(&r.agents);
                for w in &r.warnings {
                    eprintln!("warning: {w}");
                }
            }
        }
        AgentsAction::Enable { agent, layer } => {
            return edit(
                &mut c,
                &layer,
                json!({"op": "policy_list", "field": "denied", "id": agent, "present": false}),
                json,
            )
            .await;
        }
        AgentsAction::Disable { agent, layer } => {
            return edit(
                &mut c,
                &layer,
                json!({"op": "policy_list", "field": "denied", "id": agent, "present": true}),
                json,
            )
            .await;
        }
        AgentsAction::SetModel { agent, model, layer } => {
            return edit(&mut c, &layer, json!({"op": "set_model", "agent": agent, "model": model}), json).await;
        }
        AgentsAction::UnsetModel { agent, layer } => {
            return edit(&mut c, &layer, json!({"op": "unset_model", "agent": agent}), json).await;
        }
        AgentsAction::Describe { agent } => {
            let r = c
                .describe_agent(pb::DescribeAgentRequest { agent, workspace: cwd_string() })
                .await
                .map_err(anyhow::Error::from)?
                .into_inner();
            let info = r.agent.unwrap_or_default();
            let mut v = render::agent_json(&info);
            v["options"] = serde_json::from_str(&r.options_json).unwrap_or(Value::Null);
            v["protections"] = serde_json::from_str(&r.protections_json).unwrap_or(Value::Null);
            if json {
                println!("{v}");
            } else {
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            }
        }
    }
    Ok(0)
}

/// Exits 1 when something is wrong, and says how to fix it.
pub(crate) async fn doctor(json: bool) -> Result<u8, Failure> {
    let paths = Paths::from_env().map_err(anyhow::Error::from)?;
    let mut problems = Vec::new();
    let mut c = match connect().await {
        Ok(c) => c,
        Err(e) => {
            let f = Failure::from(e);
            if json {
                println!("{}", json!({"ok": false, "daemon": {"running": false, "error": f.message}}));
            } else {
                println!("daemon: NOT RUNNING: {}", f.message);
            }
            return Ok(1);
        }
    };
    let (_, ping) = client::connect(&paths).await.map_err(anyhow::Error::from)?;
    let agents = c
        .list_agents(pb::ListAgentsRequest { workspace: cwd_string() })
        .await
        .map_err(anyhow::Error::from)?
        .into_inner()
        .agents;
    let health =
        c.health(pb::HealthRequest { workspace: cwd_string() }).await.map_err(anyhow::Error::from)?.into_inner();
    if !health.store_ok {
        problems.push(format!(
            "the store failed its integrity check: {}. Stop the daemon and restore {}/caesar.db from a backup",
            health.store_error, ping.state_dir
        ));
    }
    problems.extend(health.problems);
    if !agents.iter().any(|a| a.installed) {
        problems.push(
            "no agent is installed: install a provider CLI (claude, codex, gemini, ...) or declare an [[agent]]"
                .to_owned(),
        );
    }
    if json {
        let list: Vec<Value> = agents.iter().map(render::agent_json).collect();
        println!(
            "{}",
            json!({"ok": problems.is_empty(), "daemon": render::ping_json(&ping), "store_ok": health.store_ok,
                   "http": if health.http_url.is_empty() { Value::Null } else { json!({"url": health.http_url, "listening": health.http_listening}) },
                   "environment": health.environment, "protections": health.protections, "agents": list, "problems": problems})
        );
    } else {
        println!(
            "daemon: caesard {} (pid {}, API protocol {}) at {}",
            ping.version, ping.pid, ping.protocol, ping.socket
        );
        println!("state:  {}", ping.state_dir);
        println!("env:    {}", health.environment);
        println!("sandbox: {}", health.protections);
        println!("store:  {}", if health.store_ok { "ok" } else { "DAMAGED" });
        if !health.http_url.is_empty() {
            println!(
                "http:   {} ({})",
                health.http_url,
                if health.http_listening { "listening" } else { "NOT ANSWERING" }
            );
        }
        println!();
        render::print_agents(&agents);
        for p in &problems {
            println!("\nPROBLEM: {p}");
        }
    }
    Ok(if problems.is_empty() { 0 } else { 1 })
}
