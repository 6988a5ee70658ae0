//! The open-file limit helpers of the `cli` and `cli_sweep` test binaries: start a process
//! under a limit, and lower a running one's.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Starts `cmd` under the open-file limits `soft` and `hard`.
pub fn limit_files(cmd: &mut Command, soft: u64, hard: u64) {
    // SAFETY: the hook only calls setrlimit, which is async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
}

/// The process's descriptors now: sockets, and everything else.
fn descriptors(pid: u32) -> (usize, usize) {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return (0, 0);
    };
    let mut sockets = 0;
    let mut other = 0;
    for entry in dir.flatten() {
        match std::fs::read_link(entry.path()) {
            Ok(to) if to.to_string_lossy().starts_with("socket:") => sockets += 1,
            Ok(_) => other += 1,
            Err(_) => {}
        }
    }
    (sockets, other)
}

/// Runs the process `pid` out of files mid-run: waits (up to 30 s) until it holds 10
/// sockets, then lowers its open-file limit, soft and hard (`prlimit(2)`, as `prlimit --pid`
/// does), to what it holds besides sockets plus 4, so most of its later connects fail with
/// "Too many open files". `what` names the run in a failure; (sockets open, the new limit).
pub fn starve_of_files(pid: u32, what: &str) -> (usize, u64) {
    let started = std::time::Instant::now();
    let (sockets, other) = loop {
        let (sockets, other) = descriptors(pid);
        if sockets >= 10 {
            break (sockets, other);
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "{what}: canaryd never opened its connections ({sockets} sockets)"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let files = (other + 4) as u64;
    let limit = libc::rlimit {
        rlim_cur: files,
        rlim_max: files,
    };
    // SAFETY: prlimit reads one rlimit struct through a valid pointer and writes none.
    let set = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(set, 0, "prlimit: {}", std::io::Error::last_os_error());
    (sockets, files)
}
