//! The configuration's layers, merge, checks and hostile files, tested on real files.

#[cfg(test)]
mod bin_tests {
    use super::super::*;

    #[test]
    fn a_relative_bin_is_the_config_files_and_a_bare_name_is_on_path() {
        let f = Path::new("/p/.caesar/config.toml");
        assert_eq!(anchor_bin(f, "./tools/agent".into()), "/p/.caesar/./tools/agent");
        assert_eq!(anchor_bin(f, "tools/agent".into()), "/p/.caesar/tools/agent");
        assert_eq!(anchor_bin(f, "claude".into()), "claude");
        assert_eq!(anchor_bin(f, "/usr/bin/x".into()), "/usr/bin/x");
    }
}

#[cfg(test)]
mod layers {
    use super::super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    struct Dirs {
        global: tempfile::TempDir,
        project: tempfile::TempDir,
    }

    impl Dirs {
        fn new() -> Dirs {
            Dirs { global: tempfile::tempdir().unwrap(), project: tempfile::tempdir().unwrap() }
        }
        fn global(&self, text: &str) {
            write(&self.global.path().join("config.toml"), text);
        }
        fn project(&self, text: &str) {
            write(&self.project.path().join(".caesar/config.toml"), text);
        }
        fn local(&self, text: &str) {
            write(&self.project.path().join(".caesar/config.local.toml"), text);
        }
        fn load(&self) -> Result<Config> {
            Config::load(self.global.path(), self.project.path())
        }
    }

    #[test]
    fn defaults_are_caesars() {
        let c = Dirs::new().load().unwrap();
        let p = &c.policy;
        assert_eq!((p.max_parallel, p.max_depth, p.default_timeout_ms), (4, 2, 600_000));
        assert_eq!(
            (p.default_isolation, p.default_mode, p.default_network),
            (IsolationPref::Auto, Mode::ReadOnly, NetworkPref::Auto)
        );
        assert!(!p.allow_recursion && !p.allow_inplace_write);
        let names: Vec<&str> = c.roles.iter().map(|(r, _)| r.name.as_str()).collect();
        assert_eq!(names, ["reviewer", "implementer", "investigator"]);
        assert_eq!(c.origin_of("policy.max_parallel"), Origin::Default);
    }

    #[test]
    fn three_layers_merge_field_by_field_with_provenance() {
        let d = Dirs::new();
        d.global("[policy]\nmax_parallel = 8\ndenied = [\"grok\", \"qwen\"]\ndefault_timeout = \"20m\"\n[models]\ncodex = \"gpt-5\"\nclaude = \"opus\"\n");
        d.project("[policy]\nmax_depth = 3\n[worktree]\ncopy = [\"node_modules\"]\nsetup = [\"npm ci\"]\n[[role]]\nname = \"reviewer\"\nagents = [\"claude\"]\nmode = \"read-only\"\n[[agent]]\nid = \"a\"\nbin = \"project-a\"\nargs = [\"{{prompt}}\"]\nnative_read_only = true\n");
        d.local("[policy]\ndenied = [\"grok\"]\ndefault_timeout = 90000\n[worktree]\nsetup = []\n[models]\ncodex = \"o4\"\n[bin]\nclaude = \"/opt/claude\"\n[[agent]]\nid = \"a\"\nbin = \"local-a\"\n");
        let c = d.load().unwrap();
        assert_eq!(c.policy.max_parallel, 8);
        assert_eq!(c.origin_of("policy.max_parallel"), Origin::Global);
        assert_eq!(c.policy.max_depth, 3);
        assert_eq!(c.origin_of("policy.max_depth"), Origin::Project);
        // A list replaces the inherited list: the local layer removed qwen.
        assert_eq!(c.policy.denied, ["grok"]);
        assert_eq!(c.origin_of("policy.denied"), Origin::Local);
        assert_eq!(c.policy.default_timeout_ms, 90_000);
        assert_eq!(c.worktree.copy, ["node_modules"]);
        assert!(c.worktree.setup.is_empty(), "the local layer emptied setup");
        assert_eq!(c.origin_of("worktree.setup"), Origin::Local);
        assert_eq!(c.models["codex"], ("o4".to_owned(), Origin::Local));
        assert_eq!(c.models["claude"], ("opus".to_owned(), Origin::Global));
        assert_eq!(c.bin["claude"], ("/opt/claude".to_owned(), Origin::Local));
        let (reviewer, origin) = c.roles.iter().find(|(r, _)| r.name == "reviewer").unwrap();
        assert_eq!((reviewer.agents.as_slice(), *origin), (&["claude".to_owned()][..], Origin::Project));
        assert_eq!(reviewer.isolation, IsolationPref::Auto, "a role replaced whole takes its own defaults");
        assert_eq!(c.roles.len(), 3);
        let a = c.agent("a").unwrap();
        assert_eq!(a.bin, "local-a");
        assert_eq!(a.native_read_only, None, "an agent replaced whole");
        assert_eq!(c.files.len(), 3);
    }

    struct NoTrust;
    impl crate::trust::Gate for NoTrust {
        fn trusts(&self, _file: &Path, _text: &str) -> bool {
            false
        }
    }

    #[test]
    fn nested_workspaces_are_absolute_and_only_the_users_own_config_names_them() {
        let d = Dirs::new();
        d.global("[policy]\nnested_workspaces = [\"/srv/shared\"]\n");
        assert_eq!(d.load().unwrap().policy.nested_workspaces, ["/srv/shared"]);
        d.global("[policy]\nnested_workspaces = [\"relative/dir\"]\n");
        let err = d.load().unwrap_err().to_string();
        assert!(err.contains("nested_workspaces") && err.contains("relative/dir") && err.contains("absolute"), "{err}");
        // An untrusted repository config cannot widen it.
        d.global("");
        d.project("[policy]\nnested_workspaces = [\"/home\"]\n");
        let c = Config::load_gated(d.global.path(), d.project.path(), &NoTrust).unwrap();
        assert!(c.policy.nested_workspaces.is_empty(), "{:?}", c.policy.nested_workspaces);
    }

    #[test]
    fn box_limits_are_bounded_and_an_untrusted_file_may_only_lower_them() {
        let d = Dirs::new();
        d.global("[policy]\nbox_memory_max_mb = 2048\nbox_pids_max = 512\n");
        let p = d.load().unwrap().policy;
        assert_eq!((p.box_memory_max_mb, p.box_pids_max, p.box_cpu_weight), (Some(2048), Some(512), None));
        d.global("[policy]\nbox_cpu_weight = 0\n");
        let err = d.load().unwrap_err().to_string();
        assert!(err.contains("box_cpu_weight") && err.contains("from 1 to 10000"), "{err}");
        // An untrusted repository lowers a limit, or sets one where none was,
        // but does not raise one.
        d.global("[policy]\nbox_memory_max_mb = 2048\n");
        d.project("[policy]\nbox_memory_max_mb = 1024\nbox_pids_max = 64\n");
        let p = Config::load_gated(d.global.path(), d.project.path(), &NoTrust).unwrap().policy;
        assert_eq!((p.box_memory_max_mb, p.box_pids_max), (Some(1024), Some(64)));
        d.project("[policy]\nbox_memory_max_mb = 65536\n");
        let p = Config::load_gated(d.global.path(), d.project.path(), &NoTrust).unwrap().policy;
        assert_eq!(p.box_memory_max_mb, Some(2048));
    }

    #[test]
    fn bad_files_are_refused_with_file_line_and_key() {
        let d = Dirs::new();
        d.project("[policy]\nmax_parallel = 2\ndefault_mode = \"yolo\"\n");
        let err = d.load().unwrap_err().to_string();
        assert!(err.contains("config.toml:3") && err.contains("yolo") && err.contains("key `default_mode`"), "{err}");

        d.project("[worktree]\ncopy = [\"../secrets\"]\n");
        let err = d.load().unwrap_err().to_string();
        assert!(err.contains("copy") && err.contains("..") && err.contains(":2"), "{err}");
        d.project("[worktree]\nlink = [\"/etc\"]\n");
        assert!(d.load().unwrap_err().to_string().contains("absolute"));
        d.project("[worktree]\ncopy = [\".git/config\"]\n");
        assert!(d.load().unwrap_err().to_string().contains(".git"));

        d.project("[models]\ncodex = \"\"\n");
        assert!(d.load().unwrap_err().to_string().contains("[models] is empty"));
        d.project("[policy]\ndefault_timeout = \"10 parsecs\"\n");
        assert!(d.load().unwrap_err().to_string().contains("default_timeout"));
        d.project("[polcy]\nmax_parallel = 2\n");
        assert!(d.load().unwrap_err().to_string().contains("polcy"));
        d.project("[[agent]]\nid = \"a\"\nbin = \n");
        assert!(d.load().unwrap_err().to_string().contains("config.toml:3"));
        d.project("[[agent]]\nid = \"a b\"\nbin = \"x\"\n");
        assert!(d.load().is_err());
        d.project("[[agent]]\nid = \"a\"\nbin = \"x\"\nprotocol = \"jsonrpc\"\n");
        let e = d.load().unwrap_err().to_string();
        assert!(e.contains("protocol `jsonrpc`") && e.contains("`stream`") && e.contains("`acp`"), "{e}");
        d.project("[[agent]]\nid = \"a\"\nbin = \"x\"\nprotocol = \"acp\"\n");
        assert!(d.load().unwrap().agent("a").unwrap().speaks_acp());
        // prompt_input (issue 19): `argv` or `stdin`, and `stdin` with no `{{prompt}}` in args.
        d.project("[[agent]]\nid = \"a\"\nbin = \"x\"\nprompt_input = \"file\"\n");
        let e = d.load().unwrap_err().to_string();
        assert!(e.contains("prompt_input `file`") && e.contains("`argv`") && e.contains("`stdin`"), "{e}");
        d.project("[[agent]]\nid = \"a\"\nbin = \"x\"\nprompt_input = \"stdin\"\nargs = [\"{{prompt}}\"]\n");
        assert!(d.load().unwrap_err().to_string().contains("remove `{{prompt}}`"));
        d.project("[[agent]]\nid = \"a\"\nbin = \"x\"\nprompt_input = \"stdin\"\n");
        assert!(d.load().unwrap().agent("a").unwrap().prompt_on_stdin());
        d.project("[policy]\nmax_parallel = 0\n");
        assert!(d.load().unwrap_err().to_string().contains("at least 1"));
    }
}

#[cfg(all(test, unix))]
mod hostile_layer_tests {
    use std::time::{Duration, Instant};

    use super::super::*;

    #[test]
    fn a_committed_config_linked_to_dev_zero_or_a_fifo_is_refused_at_once() {
        let global = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let dir = project.path().join(".caesar");
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.join("config.toml")).unwrap();
        let e = Config::load(global.path(), project.path()).unwrap_err().to_string();
        assert!(e.contains("config.toml") && e.contains("symbolic link"), "{e}");

        nix::unistd::mkfifo(&dir.join("config.local.toml"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        std::fs::remove_file(dir.join("config.toml")).unwrap();
        let t = Instant::now();
        let e = Config::load(global.path(), project.path()).unwrap_err().to_string();
        assert!(t.elapsed() < Duration::from_secs(2), "the FIFO blocked the load");
        assert!(e.contains("config.local.toml") && e.contains("FIFO"), "{e}");

        std::fs::remove_file(dir.join("config.local.toml")).unwrap();
        std::fs::write(dir.join("config.toml"), vec![b'#'; crate::safe_fs::CONFIG_CAP as usize + 1]).unwrap();
        let e = Config::load(global.path(), project.path()).unwrap_err().to_string();
        assert!(e.contains("cap of"), "{e}");
    }

    #[test]
    fn a_committed_dot_caesar_linked_elsewhere_is_refused() {
        let global = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::write(elsewhere.path().join("config.toml"), "[policy]\nmax_parallel = 2\n").unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), project.path().join(".caesar")).unwrap();
        let e = Config::load(global.path(), project.path()).unwrap_err().to_string();
        assert!(e.contains(".caesar/config.toml") && e.contains("symbolic link"), "{e}");
    }

    #[test]
    fn a_linked_global_layer_is_still_read() {
        let global = tempfile::tempdir().unwrap();
        let dotfiles = tempfile::tempdir().unwrap();
        std::fs::write(dotfiles.path().join("caesar.toml"), "[policy]\nmax_parallel = 2\n").unwrap();
        std::os::unix::fs::symlink(dotfiles.path().join("caesar.toml"), global.path().join("config.toml")).unwrap();
        let c = Config::load_global(global.path()).unwrap();
        assert_eq!(c.policy.max_parallel, 2);
    }
}

#[cfg(test)]
mod worktree_projects {
    use super::super::*;

    #[test]
    fn a_caesar_worktree_belongs_to_the_project_it_was_made_from() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("p");
        let wt = p.join(".caesar/wt/t_1");
        let nested = wt.join(".caesar/wt/t_2/src");
        for dir in [&wt.join(".caesar"), &nested] {
            std::fs::create_dir_all(dir).unwrap();
        }
        // The worktree holds a `.caesar/` of its own: it is not the project.
        assert_eq!(project_root(&wt), p);
        assert_eq!(project_root(&wt.join(".caesar")), p);
        assert_eq!(project_root(&nested), p, "a nested worktree's project is the outermost");
        // A directory merely named `wt` elsewhere is no worktree.
        let other = d.path().join("q/wt/x");
        std::fs::create_dir_all(other.join(".caesar")).unwrap();
        assert_eq!(project_root(&other), other);
    }
}
