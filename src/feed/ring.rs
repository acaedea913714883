//! A run's numbered frames, oldest first, capped in bytes.
//!
//! Frames are copied back to back into fixed-size blocks rather than kept one allocation each:
//! pushing a frame allocates nothing once the first blocks exist (a block the cap frees is kept
//! for the next one), and what is held stays within the cap plus about two blocks.

use std::collections::VecDeque;

/// A run's first block: most turns are short, and a held run writes 1–2 KiB (its start, its
/// session, a first message) and then waits for minutes (benches/REPORT.md, issue 27, third pass).
const FIRST_BLOCK: usize = 2048;

pub(super) struct Ring {
    blocks: VecDeque<Vec<u8>>,
    /// The number of `blocks[0]` since the ring began (blocks are numbered in push order).
    first_block: u64,
    /// One freed block, reused before allocating another.
    spare: Option<Vec<u8>>,
    block_size: usize,
    frames: VecDeque<Entry>,
    /// The bytes of the frames held.
    pub(super) bytes: usize,
    cap: usize,
    /// The first position of this run (0: none yet); cursors before it are another run's.
    pub(super) first: u64,
    pub(super) last: u64,
    /// The newest position dropped for the cap: a cursor before it is no longer held.
    pub(super) evicted: u64,
}

struct Entry {
    seq: u64,
    block: u64,
    start: usize,
    end: usize,
}

impl Ring {
    pub(super) fn new(cap: usize) -> Ring {
        Ring {
            blocks: VecDeque::new(),
            first_block: 0,
            spare: None,
            // A few blocks per cap: small enough that the last, partly used one wastes little.
            block_size: (cap / 8).clamp(4096, 64 * 1024),
            frames: VecDeque::new(),
            bytes: 0,
            cap,
            first: 0,
            last: 0,
            evicted: 0,
        }
    }

    /// Keeps `frame` at position `seq`, then drops the oldest frames beyond the cap (never the
    /// newest one).
    pub(super) fn push(&mut self, seq: u64, frame: &[u8]) {
        let fits = self
            .blocks
            .back()
            .is_some_and(|b| b.capacity() - b.len() >= frame.len());
        if !fits && !self.grow_only_block(frame.len()) {
            self.new_block(frame.len());
        }
        let block = self.first_block + self.blocks.len() as u64 - 1;
        let last = self.blocks.back_mut().expect("a block was just made");
        let start = last.len();
        last.extend_from_slice(frame);
        self.frames.push_back(Entry {
            seq,
            block,
            start,
            end: last.len(),
        });
        self.bytes += frame.len();
        if self.first == 0 {
            self.first = seq;
        }
        self.last = seq;
        self.evict();
    }

    /// The ring's only block, smaller than a full block (a run's first), grows to a full block
    /// for a frame that does not fit, rather than a second block beside it: a turn of 2 to 4 KiB
    /// holds 4 KiB, as before the first block was small. Positions stay valid: entries name a
    /// block by number and offsets within it.
    fn grow_only_block(&mut self, frame: usize) -> bool {
        let block_size = self.block_size;
        let only = self.blocks.len() == 1;
        match self.blocks.back_mut() {
            Some(b) if only && b.capacity() < block_size && b.len() + frame <= block_size => {
                b.reserve_exact(block_size - b.len());
                true
            }
            _ => false,
        }
    }

    fn new_block(&mut self, at_least: usize) {
        let block = match self.spare.take() {
            Some(mut b) if b.capacity() >= at_least => {
                b.clear();
                b
            }
            _ if self.last == 0 => Vec::with_capacity(FIRST_BLOCK.max(at_least)),
            _ => Vec::with_capacity(self.block_size.max(at_least)),
        };
        self.blocks.push_back(block);
    }

    fn evict(&mut self) {
        while self.bytes > self.cap && self.frames.len() > 1 {
            let Some(gone) = self.frames.pop_front() else {
                break;
            };
            self.bytes -= gone.end - gone.start;
            self.evicted = gone.seq;
        }
        let oldest = self.frames.front().map_or(u64::MAX, |e| e.block);
        while self.first_block < oldest && !self.blocks.is_empty() {
            let freed = self.blocks.pop_front();
            self.first_block += 1;
            if freed
                .as_ref()
                .is_some_and(|b| b.capacity() == self.block_size)
            {
                self.spare = freed;
            }
        }
    }

    /// Appends the frames after position `after` to `out`, stopping once it holds `limit` bytes
    /// (at least one frame): how many, and the position of the last one (`after` if none).
    pub(super) fn copy_after(&self, after: u64, out: &mut Vec<u8>, limit: usize) -> (usize, u64) {
        let (mut count, mut last) = (0, after);
        for e in self.frames.iter().filter(|e| e.seq > after) {
            if count > 0 && out.len() >= limit {
                break;
            }
            let block = &self.blocks[(e.block - self.first_block) as usize];
            out.extend_from_slice(&block[e.start..e.end]);
            count += 1;
            last = e.seq;
        }
        (count, last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames_after(ring: &Ring, after: u64) -> Vec<u8> {
        let mut out = Vec::new();
        ring.copy_after(after, &mut out, usize::MAX);
        out
    }

    #[test]
    fn frames_come_back_in_order_and_the_oldest_go_beyond_the_cap() {
        let mut ring = Ring::new(10_000);
        let frame = |i: u64| format!("frame {i:04} ").repeat(20).into_bytes();
        for i in 1..=200 {
            ring.push(i, &frame(i));
        }
        assert!(ring.bytes <= 10_000, "{}", ring.bytes);
        assert_eq!(ring.last, 200);
        assert_eq!(ring.first, 1);
        let held = ring.frames.len() as u64;
        assert_eq!(ring.evicted, 200 - held);
        let want: Vec<u8> = (198..=200).flat_map(frame).collect();
        assert_eq!(frames_after(&ring, 197), want);
        // A reader copies at most about `limit` bytes at once, and always a frame.
        let mut out = Vec::new();
        assert_eq!(ring.copy_after(197, &mut out, 1), (1, 198));
        assert_eq!(out, frame(198));
        // Blocks of evicted frames are released: what is allocated stays near the cap.
        let allocated: usize = ring.blocks.iter().map(Vec::capacity).sum();
        assert!(allocated <= 10_000 + 2 * ring.block_size, "{allocated}");
    }

    #[test]
    fn a_short_turn_keeps_one_block_grown_from_the_small_first_one() {
        let mut ring = Ring::new(64 * 1024);
        let frame = [b'x'; 700];
        ring.push(1, &frame);
        assert_eq!(ring.blocks.len(), 1);
        assert_eq!(ring.blocks[0].capacity(), FIRST_BLOCK);
        ring.push(2, &frame);
        ring.push(3, &frame);
        assert_eq!(ring.blocks.len(), 1, "the first block grew instead");
        assert_eq!(ring.blocks[0].capacity(), ring.block_size);
        assert_eq!(frames_after(&ring, 0), [frame; 3].concat());
        for seq in 4..16 {
            ring.push(seq, &frame);
        }
        assert!(ring.blocks.len() > 1, "then full blocks are added");
        assert_eq!(frames_after(&ring, 13), [frame; 2].concat());
    }

    #[test]
    fn a_frame_larger_than_the_cap_is_kept_alone_until_the_next_one() {
        let mut ring = Ring::new(100);
        ring.push(1, &[b'a'; 50]);
        ring.push(2, &vec![b'b'; 10_000]);
        assert_eq!(frames_after(&ring, 0), vec![b'b'; 10_000]);
        assert_eq!(ring.evicted, 1);
        ring.push(3, b"c");
        assert_eq!(frames_after(&ring, 0), b"c");
        assert_eq!(ring.blocks.len(), 1);
    }
}
