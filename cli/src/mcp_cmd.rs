//! `caesar mcp …`: register caesar-mcp with an MCP client, show the token
//! of MCP over HTTP, or run the stdio server itself.

use super::*;

/// `caesar mcp`: run one of its subcommands.
pub(crate) async fn mcp(action: McpAction, json: bool) -> Result<u8, Failure> {
    match action {
        McpAction::Install { client, dry_run, uninstall } => install(&client, dry_run, uninstall, json),
        McpAction::Token { rotate, readonly } => token(rotate, readonly, json).await,
        McpAction::Serve { args } => serve(&args),
    }
}

/// `caesar mcp install`: write (or remove, or only describe) caesar-mcp's
/// entry in the client's configuration.
fn install(client: &str, dry_run: bool, uninstall: bool, json: bool) -> Result<u8, Failure> {
    let plan = mcp_install::install(client, uninstall, dry_run)?;
    if json {
        println!(
            "{}",
            json!({"client": client, "changed": plan.changed, "dry_run": dry_run, "summary": plan.summary,
                   "path": plan.path, "command": plan.command})
        );
    } else {
        println!("{}{}", if dry_run && plan.changed { "would " } else { "" }, plan.summary);
    }
    Ok(0)
}

/// `caesar mcp token`: print the bearer token of MCP over HTTP (rotated or
/// read-only on request), and on stderr where to use it.
async fn token(rotate: bool, readonly: bool, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    let r = c.http_token(pb::HttpTokenRequest { rotate, readonly }).await.map_err(anyhow::Error::from)?.into_inner();
    if json {
        println!("{}", json!({"token": r.token, "url": r.url, "rotated": rotate, "readonly": readonly}));
    } else {
        println!("{}", r.token);
        if r.url.is_empty() {
            eprintln!(
                "caesar: MCP over HTTP is off: set [http] listen = \"127.0.0.1:7077\" in the global config and restart caesard"
            );
        } else if readonly {
            eprintln!(
                "caesar: {} with `Authorization: Bearer <token>`: the read-only token, served the readonly profile only",
                r.url
            );
        } else {
            eprintln!("caesar: {} with `Authorization: Bearer <token>`", r.url);
        }
    }
    Ok(0)
}

/// `caesar mcp serve`: become caesar-mcp with these arguments (exec on
/// Unix, a child elsewhere).
fn serve(args: &[String]) -> Result<u8, Failure> {
    let shim = mcp_install::shim_path();
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let e = std::process::Command::new(&shim).args(args).exec();
        Err(Failure { code: 1, message: format!("cannot run {}: {e}", shim.display()) })
    }
    #[cfg(not(unix))]
    {
        let status = std::process::Command::new(&shim).args(args).status().map_err(anyhow::Error::from)?;
        Ok(status.code().unwrap_or(1) as u8)
    }
}
