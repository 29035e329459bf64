//! The commands over the layered configuration: `caesar policy`, `caesar
//! role`, `caesar init` and the `caesar config` screen. Every edit is an
//! `EditConfig` call: the daemon writes the file, comments kept.

use super::*;

pub(crate) async fn edit(c: &mut Client, layer: &LayerArgs, edit: Value, json: bool) -> Result<u8, Failure> {
    let r = c
        .edit_config(pb::EditConfigRequest {
            workspace: cwd_string(),
            layer: layer.name().to_owned(),
            edit_json: edit.to_string(),
        })
        .await
        .map_err(anyhow::Error::from)?
        .into_inner();
    if json {
        println!("{}", json!({"changed": r.changed, "message": r.message, "path": r.path}));
    } else {
        println!("{}{}", r.message, if r.changed { format!(" ({})", r.path) } else { " (nothing changed)".to_owned() });
    }
    Ok(0)
}

pub(crate) async fn init(global: bool, force: bool, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    let r = c
        .init_project(pb::InitProjectRequest { workspace: cwd_string(), global, force })
        .await
        .map_err(anyhow::Error::from)?
        .into_inner();
    if json {
        println!("{}", json!({"written": r.written, "kept": r.kept}));
    } else {
        for w in &r.written {
            println!("wrote {w}");
        }
        for k in &r.kept {
            println!("kept  {k}");
        }
    }
    Ok(0)
}

pub(crate) async fn show_config(c: &mut Client) -> Result<Value, Failure> {
    let r = c
        .show_config(pb::ShowConfigRequest { workspace: cwd_string() })
        .await
        .map_err(anyhow::Error::from)?
        .into_inner();
    Ok(serde_json::from_str(&r.config_json).unwrap_or(Value::Null))
}

/// `caesar config`: the interactive screen (`config_ui`); it has no JSON form.
pub(crate) async fn config_screen(json: bool) -> Result<u8, Failure> {
    if json {
        return Err(Failure {
            code: 2,
            message: "caesar config is an interactive screen and prints no JSON: use `caesar policy show --json`, `caesar role list --json` or `caesar agents list --json` to read the config".to_owned(),
        });
    }
    let c = connect().await?;
    config_ui::run(c, cwd_string()).await?;
    Ok(0)
}

pub(crate) async fn policy(action: PolicyAction, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    match action {
        PolicyAction::Show => {
            let config = show_config(&mut c).await?;
            let provenance = &config["provenance"];
            if json {
                println!("{}", json!({"policy": config["policy"], "provenance": provenance}));
            } else if let Some(policy) = config["policy"].as_object() {
                for (key, value) in policy {
                    let name = if key == "default_timeout_ms" { "default_timeout" } else { key.as_str() };
                    let origin = provenance[format!("policy.{name}")].as_str().unwrap_or("default");
                    println!("{key:<22} {value:<30} ({origin})");
                    for line in untrusted_values(&config["untrusted"], name) {
                        println!("{:<22} {line}", "");
                    }
                }
            }
            Ok(0)
        }
        PolicyAction::Allow { agent, layer } => {
            edit(&mut c, &layer, json!({"op": "policy_list", "field": "allowed", "id": agent, "present": true}), json)
                .await
        }
        PolicyAction::Deny { agent, layer } => {
            edit(&mut c, &layer, json!({"op": "policy_list", "field": "denied", "id": agent, "present": true}), json)
                .await
        }
        PolicyAction::Nest { dir, layer } => {
            let edit_json = json!({"op": "policy_list", "field": "nested_workspaces", "id": dir, "present": true});
            edit(&mut c, &layer, edit_json, json).await
        }
    }
}

/// What each untrusted file would set `policy.<name>` to, and the command
/// that would let it (issue 30): `policy show` says why a value is not the
/// file's, rather than a bare "(default)".
fn untrusted_values(untrusted: &Value, name: &str) -> Vec<String> {
    let prefix = format!("policy.{name} = ");
    let Some(layers) = untrusted.as_array() else { return Vec::new() };
    let mut out = Vec::new();
    for u in layers {
        let file = u["file"].as_str().unwrap_or_default();
        let project = u["project"].as_str().unwrap_or_default();
        for key in u["ignored"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if let Some(value) = key.strip_prefix(&prefix) {
                out.push(format!(
                    "{file} would set {value}, but it is not trusted: read it, then run `caesar trust {project}`"
                ));
            }
        }
    }
    out
}

pub(crate) async fn role(action: RoleAction, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    match action {
        RoleAction::List | RoleAction::Show { .. } => {
            let roles = c
                .list_roles(pb::ListRolesRequest { workspace: cwd_string() })
                .await
                .map_err(anyhow::Error::from)?
                .into_inner()
                .roles_json;
            let mut roles: Vec<Value> = roles.iter().filter_map(|r| serde_json::from_str(r).ok()).collect();
            if let RoleAction::Show { name } = &action {
                roles.retain(|r| r["name"] == name.as_str());
                if roles.is_empty() {
                    return Err(Failure { code: 2, message: format!("no role `{name}`: see `caesar role list`") });
                }
            }
            if json {
                println!("{}", json!({ "roles": roles }));
            } else {
                for r in &roles {
                    println!(
                        "{:<14} {:<10} picks {:<12} ({})  {}",
                        r["name"].as_str().unwrap_or(""),
                        r["mode"].as_str().unwrap_or(""),
                        r["would_pick"].as_str().unwrap_or("nobody"),
                        r["origin"].as_str().unwrap_or(""),
                        r["purpose"].as_str().unwrap_or("")
                    );
                    if matches!(action, RoleAction::Show { .. }) {
                        println!("{}", serde_json::to_string_pretty(r).unwrap_or_default());
                    }
                }
            }
            Ok(0)
        }
        RoleAction::Add { name, agents, mode, purpose, isolation, network, timeout, model, layer } => {
            let role = json!({
                "name": name, "agents": agents, "mode": mode, "purpose": purpose,
                "isolation": isolation, "network": network, "timeout": timeout, "model": model,
            });
            edit(&mut c, &layer, json!({"op": "role_add", "role": role}), json).await
        }
        RoleAction::Remove { name, layer } => {
            edit(&mut c, &layer, json!({"op": "role_remove", "name": name}), json).await
        }
    }
}
