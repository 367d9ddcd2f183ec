//! The store's Parquet files, written by a thread of their own: the block encoder fills a
//! file's buffer and hands it over when full, and goes on while that thread's `write` has
//! the kernel copy it into the page cache. At 10 M spots x 60 tracks those copies took a
//! quarter of the encoder thread's time, serial with the pool's encoding of the next block
//! (docs/performance.md). The bytes and their order in each file are unchanged.
//!
//! Errors: the first failed write of a file is kept and returned by every later call on
//! that file (`write`, `flush`, [`QueuedFile::finish`]); `finish` returns only after every
//! byte handed over was written and the file synced.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

/// Largest write buffer of a file the writer makes (spilled runs, Parquet files, `.cdz`).
/// Small writes are costly here: with std's 8 KiB buffers ext4 zeroed the rest of each new
/// page-cache folio a write began, and at 10 M x 60 the spill writes took ~3x the system
/// time they take with 1 MiB writes (docs/performance.md).
pub(crate) const MAX_WRITE_BUFFER: usize = 1 << 20;

/// Full buffers waiting for the write thread, at most. Besides each file's own buffer the
/// queue holds up to `2 * QUEUE_DEPTH + 1`: waiting, being written, and written ones kept
/// for reuse (at most `QUEUE_DEPTH`); the writer's memory plan counts them.
pub(crate) const QUEUE_DEPTH: usize = 4;

/// A file of the store and the first error writing it.
struct Shared {
    file: File,
    error: Mutex<Option<(io::ErrorKind, String)>>,
}

impl Shared {
    fn failed(&self) -> io::Result<()> {
        match &*self.error.lock().unwrap_or_else(|p| p.into_inner()) {
            Some((kind, msg)) => Err(io::Error::new(*kind, msg.clone())),
            None => Ok(()),
        }
    }

    fn keep(&self, e: &io::Error) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some((e.kind(), e.to_string()));
        }
    }
}

enum Job {
    Write(Arc<Shared>, Vec<u8>),
    /// Sync the file once everything before was written; the outcome goes to the sender.
    Sync(Arc<Shared>, SyncSender<io::Result<()>>),
}

/// The write thread of one store write. It ends when the queue and every file made from it
/// are dropped; dropping the queue after its files joins it (a library must not leave a
/// thread running its code behind, e.g. for a host that unloads it).
pub(crate) struct WriteQueue {
    jobs: SyncSender<Job>,
    /// Buffers the thread has written, for reuse.
    spare: Arc<Mutex<Vec<Vec<u8>>>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// One more reference per file not yet finished or dropped.
    files: Arc<()>,
}

impl WriteQueue {
    /// Starts the write thread (`Io` error when the system refuses a thread).
    pub(crate) fn start() -> io::Result<WriteQueue> {
        let (jobs, rx) = sync_channel::<Job>(QUEUE_DEPTH);
        let spare = Arc::new(Mutex::new(Vec::new()));
        let theirs = spare.clone();
        let thread = std::thread::Builder::new()
            .name("deltacells-write".into())
            .spawn(move || {
                // A panic here (none is expected: only std's file calls run) must not be
                // printed; the files' senders then fail and report it.
                let _ = crate::contain::catch(move || run(rx, &theirs));
            })?;
        Ok(WriteQueue {
            jobs,
            spare,
            thread: Some(thread),
            files: Arc::new(()),
        })
    }

    /// `file`, written by the thread through buffers of `buffer` bytes.
    pub(crate) fn file(&self, file: File, buffer: usize) -> QueuedFile {
        QueuedFile {
            shared: Arc::new(Shared {
                file,
                error: Mutex::new(None),
            }),
            jobs: self.jobs.clone(),
            spare: self.spare.clone(),
            buf: Vec::new(),
            cap: buffer.max(1),
            _alive: self.files.clone(),
        }
    }
}

impl Drop for WriteQueue {
    fn drop(&mut self) {
        // The thread ends once it has written what is queued and every sender is gone:
        // this one, and those of the files. With a file still alive it would wait, so the
        // thread is then left to end by itself when that file goes.
        let (closed, _) = sync_channel(0);
        drop(std::mem::replace(&mut self.jobs, closed));
        if Arc::strong_count(&self.files) == 1 {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}

fn run(rx: Receiver<Job>, spare: &Mutex<Vec<Vec<u8>>>) {
    for job in rx {
        match job {
            Job::Write(shared, mut buf) => {
                if shared.failed().is_ok() {
                    if let Err(e) = (&shared.file).write_all(&buf) {
                        shared.keep(&e);
                    }
                }
                buf.clear();
                let mut s = spare.lock().unwrap_or_else(|p| p.into_inner());
                if s.len() < QUEUE_DEPTH {
                    s.push(buf);
                }
            }
            Job::Sync(shared, reply) => {
                let r = shared.failed().and_then(|()| shared.file.sync_all());
                let _ = reply.send(r);
            }
        }
    }
}

fn stopped() -> io::Error {
    io::Error::other("the store's write thread stopped")
}

/// A file written through a [`WriteQueue`].
pub(crate) struct QueuedFile {
    shared: Arc<Shared>,
    jobs: SyncSender<Job>,
    spare: Arc<Mutex<Vec<Vec<u8>>>>,
    buf: Vec<u8>,
    cap: usize,
    /// Counts this file in its queue's `files` while it lives.
    _alive: Arc<()>,
}

impl QueuedFile {
    /// Hands the buffer to the thread (waits while the queue is full).
    fn hand_over(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let next = self
            .spare
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_default();
        let full = std::mem::replace(&mut self.buf, next);
        self.jobs
            .send(Job::Write(self.shared.clone(), full))
            .map_err(|_| stopped())
    }

    /// Writes what is buffered, waits until the thread has written everything handed over
    /// and synced the file, and returns the first error of any of it.
    pub(crate) fn finish(mut self) -> io::Result<()> {
        self.hand_over()?;
        let (tx, rx) = sync_channel(1);
        self.jobs
            .send(Job::Sync(self.shared.clone(), tx))
            .map_err(|_| stopped())?;
        rx.recv().map_err(|_| stopped())?
    }
}

impl Write for QueuedFile {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.shared.failed()?;
        if self.buf.capacity() < self.cap {
            self.buf.reserve_exact(self.cap - self.buf.len());
        }
        let n = (self.cap - self.buf.len()).min(data.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == self.cap {
            self.hand_over()?;
        }
        Ok(n)
    }

    /// Hands over what is buffered (the thread writes it in turn); see `finish` to wait.
    fn flush(&mut self) -> io::Result<()> {
        self.shared.failed()?;
        self.hand_over()
    }
}

/// How the store's Parquet files are written: through a buffer of `buffer` bytes, by the
/// write thread when there is one (writers with more than one thread).
pub(crate) struct FileIo {
    pub(crate) buffer: usize,
    pub(crate) queue: Option<WriteQueue>,
}

impl FileIo {
    /// Buffers of `buffer` bytes; the write thread when the writer may use more than one
    /// thread (`threads` as the writer's options give it).
    pub(crate) fn new(buffer: usize, threads: usize) -> crate::error::Result<FileIo> {
        let queue = if crate::pool::resolve_threads(threads) > 1 {
            let q = WriteQueue::start().map_err(|e| {
                crate::error::Error::new(
                    crate::error::ErrorKind::Io,
                    format!("starting the store's write thread: {e}"),
                )
            })?;
            Some(q)
        } else {
            None
        };
        Ok(FileIo { buffer, queue })
    }

    pub(crate) fn open(&self, file: File) -> SinkFile {
        match &self.queue {
            Some(q) => SinkFile::Queued(q.file(file, self.buffer)),
            None => SinkFile::Buffered(BufWriter::with_capacity(self.buffer, file)),
        }
    }
}

/// A Parquet file of the store being written.
pub(crate) enum SinkFile {
    Buffered(BufWriter<File>),
    Queued(QueuedFile),
}

impl SinkFile {
    /// Writes what is buffered and syncs the file.
    pub(crate) fn finish(self) -> io::Result<()> {
        match self {
            SinkFile::Buffered(w) => w.into_inner().map_err(|e| e.into_error())?.sync_all(),
            SinkFile::Queued(q) => q.finish(),
        }
    }
}

impl Write for SinkFile {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        match self {
            SinkFile::Buffered(w) => w.write(data),
            SinkFile::Queued(q) => q.write(data),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            SinkFile::Buffered(w) => w.flush(),
            SinkFile::Queued(q) => q.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::path::PathBuf;

    fn fresh_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("dc-queued-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn bytes_arrive_in_order_across_files_and_buffer_sizes() {
        let dir = fresh_dir("order");
        let q = WriteQueue::start().unwrap();
        let expected: Vec<Vec<u8>> = (0..3u8)
            .map(|f| (0..100_000u32).map(|i| (i * 7 + f as u32) as u8).collect())
            .collect();
        let mut files: Vec<QueuedFile> = (0..3)
            .map(|f| {
                let file = File::create(dir.join(format!("f{f}"))).unwrap();
                q.file(file, [1, 4096, 65_536][f])
            })
            .collect();
        // Interleaved writes of uneven sizes, with flushes between some of them.
        let mut at = [0usize; 3];
        let mut step = 1;
        while at.iter().any(|&a| a < 100_000) {
            for f in 0..3 {
                let end = (at[f] + step).min(100_000);
                files[f].write_all(&expected[f][at[f]..end]).unwrap();
                at[f] = end;
                if step % 5 == 0 {
                    files[f].flush().unwrap();
                }
            }
            step = step * 3 % 7919 + 1;
        }
        for f in files {
            f.finish().unwrap();
        }
        for (f, want) in expected.iter().enumerate() {
            let mut got = Vec::new();
            File::open(dir.join(format!("f{f}")))
                .unwrap()
                .read_to_end(&mut got)
                .unwrap();
            assert_eq!(&got, want, "file {f}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_outliving_its_queue_is_still_written_and_the_drop_does_not_wait() {
        let dir = fresh_dir("outlive");
        let q = WriteQueue::start().unwrap();
        let mut f = q.file(File::create(dir.join("late")).unwrap(), 16);
        drop(q);
        f.write_all(&[7u8; 100]).unwrap();
        f.finish().unwrap();
        assert_eq!(std::fs::read(dir.join("late")).unwrap(), vec![7u8; 100]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_write_is_reported_by_later_calls_and_finish() {
        let dir = fresh_dir("error");
        let path = dir.join("ro");
        std::fs::write(&path, b"x").unwrap();
        // A file opened read-only: every write the thread makes fails.
        let q = WriteQueue::start().unwrap();
        let mut f = q.file(File::open(&path).unwrap(), 8);
        // The handing over succeeds or already reports the thread's error; either way
        // `finish` must fail with the write's error, not as if the thread had stopped.
        let _ = f.write_all(&[1u8; 64]);
        let e = f.finish().unwrap_err();
        assert!(!e.to_string().contains("stopped"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), b"x");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
