//! Fuzz target: the SSE client parser (`mcp_cluster_client::SseParser`).
//!
//! The input is an event stream. Invariants:
//! - no panic;
//! - the same bytes give the same blocks and comment count whether they
//!   arrive whole, one byte at a time, or in chunks split at arbitrary points;
//! - memory stays bounded: fed the input over and over (an endless stream),
//!   the parser holds no more than a small multiple of its block limit;
//! - blocks are sane: no line break inside `id` or `event`, none in `data`
//!   unless the block had several `data` lines.
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use libfuzzer_sys::fuzz_target;
use mcp_cluster_client::{SseEvent, SseParser};

/// Counts the bytes the Rust code holds, so the target can see what the
/// parser buffers.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call forwards to `System` with the same arguments; the
// counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(new_size, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The block limit the target gives its parsers: small, so that inputs
/// reach it, alone or repeated a few times.
const LIMIT: usize = 1024;

/// Bytes fed to the parser in the memory check (the input, repeated): well
/// past what `bounded_memory` allows it to hold.
const STREAM_BYTES: usize = 32 * LIMIT;

fuzz_target!(|data: &[u8]| {
    let whole = parse(data, &mut std::iter::repeat(data.len().max(1)));
    let bytewise = parse(data, &mut std::iter::repeat(1));
    assert_eq!(bytewise, whole, "one byte at a time");
    let mut rng = Rng::new(data);
    let random = parse(data, &mut std::iter::from_fn(|| Some(rng.chunk())));
    assert_eq!(random, whole, "random chunks");
    for event in &whole.0 {
        check_event(event);
    }
    bounded_memory(data);
});

/// Feeds `data` in chunks of the sizes `sizes` yields; returns the blocks
/// and the comment count.
fn parse(data: &[u8], sizes: &mut dyn Iterator<Item = usize>) -> (Vec<SseEvent>, usize) {
    let mut parser = parser();
    let mut events = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let n = sizes.next().unwrap_or(rest.len()).clamp(1, rest.len());
        let (chunk, tail) = rest.split_at(n);
        events.extend(parser.feed(chunk));
        rest = tail;
    }
    (events, parser.comments)
}

fn parser() -> SseParser {
    SseParser::with_max_block_bytes(LIMIT)
}

fn check_event(event: &SseEvent) {
    for field in [&event.id, &event.event].into_iter().flatten() {
        assert!(!field.contains('\n') && !field.contains('\r'), "{event:?}");
    }
    if !event.has_data {
        assert!(event.data.is_empty(), "{event:?}");
    }
    // The limit counts bytes received; lossy UTF-8 turns one bad byte into
    // three (U+FFFD).
    assert!(
        event.data.len() <= 3 * LIMIT,
        "a block over the limit: {event:?}"
    );
}

/// Feeds the input again and again, as an endless stream would, and checks
/// after each chunk what the parser holds.
fn bounded_memory(data: &[u8]) {
    if data.is_empty() {
        return;
    }
    // Chunks of at least 256 bytes: the input, repeated.
    let chunk = data.repeat(256_usize.div_ceil(data.len()));
    let before = LIVE.load(Ordering::Relaxed);
    let mut parser = parser();
    let mut fed = 0;
    while fed < STREAM_BYTES {
        drop(parser.feed(&chunk));
        fed += chunk.len();
        let held = LIVE.load(Ordering::Relaxed).saturating_sub(before);
        // The block's text: the limit, tripled by lossy UTF-8, doubled by
        // vector growth; the line buffer: twice the chunk; plus change.
        let bound = 6 * LIMIT + 2 * chunk.len() + 1024;
        assert!(
            held <= bound,
            "parser holds {held} bytes after {fed} (bound {bound})"
        );
    }
}

/// A small deterministic generator of chunk sizes, seeded by the input, so
/// a crash reproduces from its input alone.
struct Rng(u64);

impl Rng {
    fn new(data: &[u8]) -> Self {
        // FNV-1a.
        let seed = data.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        Self(seed | 1)
    }

    fn chunk(&mut self) -> usize {
        // xorshift64
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        // Mostly short chunks, now and then a long one.
        match self.0 % 8 {
            0 => (self.0 >> 8) as usize % 512 + 1,
            _ => (self.0 >> 8) as usize % 8 + 1,
        }
    }
}
