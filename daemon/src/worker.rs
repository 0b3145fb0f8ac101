//! One OS thread per target pid: every injector call for that pid runs there, in order.
//!
//! ptrace binds a tracee to the tracer thread, and the zbus executor moves tasks
//! between threads, so injector calls never run on the executor. A caller waits
//! at most the configured timeout; a target that will not stop (uninterruptible
//! sleep) then costs its own worker thread, never the bus or other pids.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use argstash_dbus::{Error, ErrorKind};
use async_io::Timer;
use futures_lite::future;

type Job = Box<dyn FnOnce() + Send>;

/// Runs one job; a panic fails only that call (its reply channel closes).
fn run_job(job: Job) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
        eprintln!("argstashd: a request panicked; the worker thread goes on");
    }
}

/// How long an idle worker thread waits for work before it ends.
const IDLE: Duration = Duration::from_secs(30);

type Queues = Arc<Mutex<HashMap<i32, (u64, mpsc::Sender<Job>)>>>;

/// The worker threads, keyed by pid.
pub struct Workers {
    queues: Queues,
    next_id: AtomicU64,
    timeout: Duration,
    idle: Duration,
}

fn lock(q: &Queues) -> std::sync::MutexGuard<'_, HashMap<i32, (u64, mpsc::Sender<Job>)>> {
    q.lock().unwrap_or_else(|e| e.into_inner())
}

impl Workers {
    /// No workers yet; calls time out after `timeout`.
    pub fn new(timeout: Duration) -> Workers {
        Workers::with_idle(timeout, IDLE)
    }

    /// Like [`Workers::new`]; idle threads end after `idle`.
    pub fn with_idle(timeout: Duration, idle: Duration) -> Workers {
        Workers {
            queues: Arc::new(Mutex::new(HashMap::new())),
            next_id: AtomicU64::new(0),
            timeout,
            idle,
        }
    }

    /// Pids that have a worker thread now.
    #[cfg(test)]
    fn active(&self) -> usize {
        lock(&self.queues).len()
    }

    /// Queues `job` on `pid`'s worker, starting one if there is none.
    ///
    /// Jobs are sent under the map lock, so a worker that finds its queue empty
    /// under the same lock may end without losing one.
    fn submit(&self, pid: i32, job: Job) -> std::io::Result<()> {
        let mut queues = lock(&self.queues);
        let job = match queues.get(&pid) {
            Some((_, q)) => match q.send(job) {
                Ok(()) => return Ok(()),
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        let (tx, rx) = mpsc::channel::<Job>();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let all = self.queues.clone();
        let idle = self.idle;
        std::thread::Builder::new()
            .name(format!("pid-{pid}"))
            .spawn(move || loop {
                match rx.recv_timeout(idle) {
                    Ok(job) => run_job(job),
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        let mut queues = lock(&all);
                        match rx.try_recv() {
                            Ok(job) => {
                                drop(queues);
                                run_job(job);
                            }
                            Err(_) => {
                                if queues.get(&pid).is_some_and(|(i, _)| *i == id) {
                                    queues.remove(&pid);
                                }
                                return;
                            }
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
            })?;
        tx.send(job).expect("the new worker holds the receiver");
        queues.insert(pid, (id, tx));
        Ok(())
    }

    /// Runs `f` on `pid`'s worker thread after the calls queued before it.
    ///
    /// Returns `Busy` when the result is not there within the timeout; a call whose
    /// caller gave up before it started is skipped.
    pub async fn run<T, F>(&self, pid: i32, what: &str, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (tx, rx) = async_channel::bounded::<T>(1);
        let job: Job = Box::new(move || {
            if tx.is_closed() {
                return;
            }
            let _ = tx.try_send(f());
        });
        self.submit(pid, job).map_err(|e| {
            Error::new(
                ErrorKind::Failed,
                format!("cannot start a worker thread for process {pid}: {e}"),
            )
        })?;
        let timeout = self.timeout;
        let got = future::or(async { Some(rx.recv().await) }, async {
            Timer::after(timeout).await;
            None
        })
        .await;
        match got {
            Some(Ok(v)) => Ok(v),
            Some(Err(_)) => Err(Error::new(
                ErrorKind::Failed,
                format!("{what} on process {pid} failed: the injector panicked (see the daemon's log)"),
            )),
            None => Err(Error::new(
                ErrorKind::Busy,
                format!(
                    "process {pid} did not stop within {} ms for {what} (a thread may be in uninterruptible sleep, e.g. waiting for a vfork child or for I/O, or an earlier request is still stuck on it); try again later (an Inject or Eject may still complete: ListHooks shows the outcome)",
                    timeout.as_millis()
                ),
            )),
        }
    }

    /// Forgets `pid`'s worker; its thread ends once its queue is empty.
    pub fn forget(&self, pid: i32) {
        lock(&self.queues).remove(&pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn serial_per_pid_parallel_across_pids_busy_on_timeout() {
        let w = Workers::with_idle(Duration::from_millis(300), Duration::from_millis(100));
        async_io::block_on(async {
            // Same pid: in order, on one thread.
            let a = w.run(1, "a", || std::thread::current().id()).await.unwrap();
            let b = w.run(1, "b", || std::thread::current().id()).await.unwrap();
            assert_eq!(a, b);
            assert_ne!(a, std::thread::current().id());
            // A stuck pid is Busy after the timeout; another pid is not held up.
            let stuck = w.run(2, "stuck", || {
                std::thread::sleep(Duration::from_millis(800))
            });
            let other = async {
                let t = Instant::now();
                w.run(3, "other", || ()).await.unwrap();
                t.elapsed()
            };
            let (r, quick) = futures_lite::future::zip(stuck, other).await;
            assert_eq!(r.unwrap_err().kind(), Some(ErrorKind::Busy));
            assert!(quick < Duration::from_millis(300), "{quick:?}");
        });
        // A panicking call fails alone; the worker survives it.
        // (A long timeout: printing the panic's backtrace can be slow.)
        let slow = Workers::new(Duration::from_secs(30));
        let e = async_io::block_on(slow.run(4, "panic", || panic!("boom"))).unwrap_err();
        assert_eq!(e.kind(), Some(ErrorKind::Failed));
        assert_eq!(async_io::block_on(slow.run(4, "after", || 5)).unwrap(), 5);
        // Idle workers end and leave the map; a new call starts a fresh one.
        std::thread::sleep(Duration::from_millis(1200));
        assert_eq!(w.active(), 0);
        assert_eq!(async_io::block_on(w.run(1, "again", || 7)).unwrap(), 7);
    }
}
