//! What reading a chunk costs in memory when the scanner leaves it to serde_json (an `error`
//! key does): in proportion to the chunk's bytes, whatever a server puts in it. A server's
//! `{"choices":[{},{},…]}` of 1 MiB used to hold about 88 MB of heap, and its `"error":[…]` a
//! `serde_json::Value` tree that grew alike. Its own test binary: the allocator that
//! counts is the process's, and nothing else runs in it.

use canary_replay::parse_chunk;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to `System` unchanged; only the live byte count is kept beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most memory `parse_chunk(data)` held at once beyond what was live before, and its
/// error message.
fn peak_while_parsing(data: &str) -> (usize, Option<String>) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let info = parse_chunk(data).expect("valid JSON");
    (PEAK.load(Ordering::Relaxed) - before, info.error)
}

#[test]
fn a_chunk_the_scanner_gives_up_on_costs_memory_in_proportion_to_its_bytes() {
    let many = vec!["{}"; 1 << 18].join(",");
    let choices = format!(r#"{{"choices":[{many}],"error":{{"message":"boom"}}}}"#);
    let (peak, error) = peak_while_parsing(&choices);
    assert_eq!(error.as_deref(), Some("boom"));
    assert!(
        peak < choices.len() / 4,
        "{peak} bytes held for a chunk of {}",
        choices.len()
    );

    // An error that is not a message: kept as its JSON text, cut to 4 KiB.
    let error = format!(r#"{{"error":[{many}]}}"#);
    let (peak, message) = peak_while_parsing(&error);
    let message = message.expect("an error");
    assert_eq!(message.len(), 4096);
    assert!(message.starts_with("[{},{},"), "{}", &message[..20]);
    assert!(
        peak < error.len() / 4,
        "{peak} bytes held for a chunk of {}",
        error.len()
    );
}
