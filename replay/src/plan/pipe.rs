//! A bounded pipe between two threads, in memory: what one thread writes, the other reads, in
//! order, with at most [`DEPTH`] chunks of [`CHUNK`] bytes between them. On-the-fly synthesis
//! writes its trace through one while the trace is parsed back, so the written text is never
//! held whole (57 MB for 200k rows).

use std::io::{self, BufRead, Read, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// Bytes sent at once.
const CHUNK: usize = 64 << 10;
/// Chunks queued at most: a writer ahead of its reader by more waits.
const DEPTH: usize = 4;

/// A new pipe: its write end and its read end. The reader sees the end of input once the
/// writer is dropped; the writer's next send fails ([`io::ErrorKind::BrokenPipe`]) once the
/// reader is, so neither waits for ever on the other.
pub(super) fn bounded() -> (Writer, Reader) {
    let (tx, rx) = sync_channel(DEPTH);
    (
        Writer {
            tx,
            buf: Vec::with_capacity(CHUNK),
        },
        Reader {
            rx,
            chunk: Vec::new(),
            pos: 0,
        },
    )
}

/// The write end. Bytes not yet sent are sent by [`Write::flush`], not on drop: a writer that
/// failed part way leaves its last chunk unsent.
pub(super) struct Writer {
    tx: SyncSender<Vec<u8>>,
    buf: Vec<u8>,
}

impl Writer {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.tx
            .send(chunk)
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the reader is gone"))
    }
}

impl Write for Writer {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        // At most what fills the chunk: the buffer never grows past it.
        let n = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// The read end.
pub(super) struct Reader {
    rx: Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    pos: usize,
}

impl BufRead for Reader {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.pos == self.chunk.len() {
            match self.rx.recv() {
                Ok(chunk) => (self.chunk, self.pos) = (chunk, 0),
                // The writer is gone: the end of input.
                Err(_) => break,
            }
        }
        Ok(&self.chunk[self.pos..])
    }

    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.chunk.len());
    }
}

impl Read for Reader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_arrive_in_order_across_chunks_and_the_end_is_seen() {
        // More than the pipe holds, in odd-sized writes: the writer must wait for the reader.
        let text: Vec<u8> = (0..(CHUNK * (DEPTH + 3) + 17) as u32)
            .map(|i| (i % 251) as u8)
            .collect();
        let (mut w, mut r) = bounded();
        let got = std::thread::scope(|s| {
            let reader = s.spawn(move || {
                let mut got = Vec::new();
                r.read_to_end(&mut got).unwrap();
                got
            });
            for piece in text.chunks(1000) {
                w.write_all(piece).unwrap();
            }
            w.flush().unwrap();
            drop(w);
            reader.join().unwrap()
        });
        assert!(got == text);
    }

    #[test]
    fn a_writer_fails_once_the_reader_is_gone_rather_than_waiting() {
        let (mut w, r) = bounded();
        drop(r);
        let e = w.write_all(&vec![b'x'; CHUNK]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    }
}
