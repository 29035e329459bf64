//! A closed stdout (`caesar logs … | head`) ends caesar quietly, as it ends
//! `cat`. Rust starts programs with SIGPIPE ignored, so `println!` panics on
//! EPIPE instead. Restoring SIGPIPE's default would also kill the client
//! silently when the daemon vanishes mid-request, where the user needs an
//! error; so only that one panic becomes the shell's usual exit status, 141.

/// Installs the panic hook; every other panic still reaches the default hook.
pub fn exit_quietly_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if is_closed_stdout(message) {
            std::process::exit(141);
        }
        default(info);
    }));
}

/// The message `std` panics with when printing to a closed pipe.
fn is_closed_stdout(message: &str) -> bool {
    message.starts_with("failed printing to stdout") && message.contains("Broken pipe")
}

#[cfg(test)]
mod tests {
    use super::is_closed_stdout;

    #[test]
    fn only_the_closed_stdout_panic_is_quiet() {
        assert!(is_closed_stdout("failed printing to stdout: Broken pipe (os error 32)"));
        assert!(!is_closed_stdout("failed printing to stderr: Broken pipe (os error 32)"));
        assert!(!is_closed_stdout("failed printing to stdout: No space left on device (os error 28)"));
        assert!(!is_closed_stdout("index out of bounds"));
    }
}
