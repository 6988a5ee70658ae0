//! Compiles `src/bpf/socket.bpf.c` with clang (CO-RE, BTF-relocated at load time) into
//! `$OUT_DIR/socket.bpf.o`, and writes `$OUT_DIR/programs.rs` saying whether it did.
//!
//! Without clang or the libbpf headers the crate still builds: `programs.rs` then carries the
//! reason, and the tracer reports itself unavailable at runtime with it. A C file that does
//! not compile where clang exists fails the build: that is a bug, not a missing tool.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed=src/bpf/socket.bpf.c");
    println!("cargo:rerun-if-changed=src/bpf/socket.h");
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-env-changed=CANARY_EBPF_STUB");

    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let reason = if std::env::var_os("CANARY_EBPF_STUB").is_some() {
        Some("built with CANARY_EBPF_STUB set".to_string())
    } else if Command::new(&clang).arg("--version").output().is_err() {
        Some(format!(
            "{clang} was not found when canaryd was built (scripts/setup/ebpf.sh installs it)"
        ))
    } else if !Path::new("/usr/include/bpf/bpf_helpers.h").exists() {
        Some(
            "the libbpf headers (libbpf-dev) were missing when canaryd was built \
             (scripts/setup/ebpf.sh installs them)"
                .to_string(),
        )
    } else {
        None
    };
    let programs = match reason {
        Some(reason) => {
            println!("cargo:warning=canary-ebpf: eBPF disabled: {reason}");
            // A build that lacked clang or the libbpf headers is made again once they are
            // installed (scripts/setup/ebpf.sh), not kept in a cached target dir: installing
            // them changes these directories. Only a build without the programs watches them.
            if std::env::var_os("CANARY_EBPF_STUB").is_none() {
                for dir in ["/usr/include", "/usr/bin", "/usr/local/bin"] {
                    if Path::new(dir).is_dir() {
                        println!("cargo:rerun-if-changed={dir}");
                    }
                }
            }
            format!("pub(crate) const PROGRAMS: Result<&[u8], &str> = Err({reason:?});\n")
        }
        None => {
            compile(&clang, &out.join("socket.bpf.o"));
            "pub(crate) const PROGRAMS: Result<&[u8], &str> = \
             Ok(aya::include_bytes_aligned!(concat!(env!(\"OUT_DIR\"), \"/socket.bpf.o\")));\n"
                .to_string()
        }
    };
    std::fs::write(out.join("programs.rs"), programs).expect("write programs.rs");
}

fn compile(clang: &str, object: &Path) {
    let (arch, multiarch) = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("aarch64") => ("arm64", "aarch64-linux-gnu"),
        Ok("riscv64") => ("riscv", "riscv64-linux-gnu"),
        _ => ("x86", "x86_64-linux-gnu"),
    };
    // -mcpu=v3: atomics (the lost-event counter) need v3; v1 rejects them.
    let status = Command::new(clang)
        .args(["-O2", "-g", "-target", "bpf", "-mcpu=v3", "-Wall"])
        .arg(format!("-D__TARGET_ARCH_{arch}"))
        // <linux/bpf.h> includes <asm/types.h>, which lives under the multiarch directory.
        .arg(format!("-I/usr/include/{multiarch}"))
        .args(["-c", "src/bpf/socket.bpf.c", "-o"])
        .arg(object)
        .status()
        .expect("run clang");
    assert!(
        status.success(),
        "clang failed to compile src/bpf/socket.bpf.c"
    );
}
