use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

type Task = Box<dyn FnMut() + Send>;

/// Manages a collection of threads.
///
/// A new thread is created every time all the existing threads are full.
/// Any idle thread beyond the minimum dies after a second (`IDLE_THREAD_LINGER`).
///
/// iac-code-agui patch: a failed thread spawn is reported to the caller (with its task back)
/// instead of panicking while the queue lock is held, which poisoned the lock and then panicked
/// every later `spawn`; a task that panics is logged and its thread goes on serving.
#[derive(Clone)]
pub struct TaskPool {
    sharing: Arc<Sharing>,
    /// iac-code-agui patch: the stack size of the pool's threads (`None`: the default).
    stack: Option<usize>,
}

struct Sharing {
    // list of the tasks to be done by worker threads
    todo: Mutex<VecDeque<Task>>,

    // condvar that will be notified whenever a task is added to `todo`
    condvar: Condvar,

    // number of total worker threads running
    active_tasks: AtomicUsize,

    // number of idle worker threads
    waiting_tasks: AtomicUsize,
}

impl Sharing {
    fn todo(&self) -> MutexGuard<'_, VecDeque<Task>> {
        // tasks never run under this lock, so a poisoned lock still holds a whole queue
        self.todo.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Minimum number of active threads.
static MIN_THREADS: usize = 4;

/// How long a thread beyond `MIN_THREADS` waits idle for a task before it exits. Upstream waits
/// 5 s; a burst of parked connections resumed at once (thousands of clients leaving together)
/// then kept its threads, stacks and mappings for 5 s after their work was done. Spawning a
/// thread costs tens of microseconds, so 1 s keeps a burst's threads for the burst.
const IDLE_THREAD_LINGER: Duration = Duration::from_millis(1000);

struct Registration<'a> {
    nb: &'a AtomicUsize,
}

impl<'a> Registration<'a> {
    fn new(nb: &'a AtomicUsize) -> Registration<'a> {
        nb.fetch_add(1, Ordering::Release);
        Registration { nb }
    }
}

impl<'a> Drop for Registration<'a> {
    fn drop(&mut self) {
        self.nb.fetch_sub(1, Ordering::Release);
    }
}

impl TaskPool {
    pub fn new() -> TaskPool {
        TaskPool::with_stack(None)
    }

    /// A pool whose threads get `stack` bytes of stack (`None`: the platform's default).
    pub fn with_stack(stack: Option<usize>) -> TaskPool {
        let pool = TaskPool {
            stack,
            sharing: Arc::new(Sharing {
                todo: Mutex::new(VecDeque::new()),
                condvar: Condvar::new(),
                active_tasks: AtomicUsize::new(0),
                waiting_tasks: AtomicUsize::new(0),
            }),
        };

        for _ in 0..MIN_THREADS {
            let _ = pool.add_thread(None);
        }

        pool
    }

    /// Executes a function in a thread.
    /// If no thread is available, spawns a new one; if that fails, gives the task back.
    pub fn spawn(&self, code: Task) -> Result<(), Task> {
        let mut queue = self.sharing.todo();

        // iac-code-agui patch: a woken waiter stays counted in `waiting_tasks` until it takes the
        // lock, so a second `spawn` before that used to queue its task behind the first one and
        // leave it stranded while both ran long-lived connections (SSE streams). Only queue when
        // there are more idle threads than tasks already waiting for one.
        if self.sharing.waiting_tasks.load(Ordering::Acquire) <= queue.len() {
            drop(queue); // never spawn a thread under the lock
            self.add_thread(Some(code))
                .map_err(|task| task.expect("task given"))
        } else {
            queue.push_back(code);
            self.sharing.condvar.notify_one();
            Ok(())
        }
    }

    fn add_thread(&self, initial_fn: Option<Task>) -> Result<(), Option<Task>> {
        let sharing = self.sharing.clone();
        // the task goes through a cell so that it can be taken back if the thread never starts
        let cell = Arc::new(Mutex::new(initial_fn));
        let thread_cell = cell.clone();

        let mut builder = thread::Builder::new();
        if let Some(size) = self.stack {
            builder = builder.stack_size(size);
        }
        let spawned = builder.spawn(move || {
            let initial_fn = thread_cell.lock().unwrap_or_else(|e| e.into_inner()).take();
            drop(thread_cell);
            worker(sharing, initial_fn);
        });
        match spawned {
            Ok(_) => Ok(()),
            Err(e) => {
                log::error!("Could not start a connection thread: {}", e);
                let task = cell.lock().unwrap_or_else(|e| e.into_inner()).take();
                Err(task)
            }
        }
    }
}

fn run(task: Task) {
    if catch_unwind(AssertUnwindSafe(task)).is_err() {
        log::error!("A connection task panicked; its thread goes on");
    }
}

fn worker(sharing: Arc<Sharing>, initial_fn: Option<Task>) {
    let _active_guard = Registration::new(&sharing.active_tasks);

    if let Some(f) = initial_fn {
        run(f);
    }

    loop {
        let task: Task = {
            let mut todo = sharing.todo();

            let task;
            loop {
                if let Some(poped_task) = todo.pop_front() {
                    task = poped_task;
                    break;
                }
                let _waiting_guard = Registration::new(&sharing.waiting_tasks);

                let received = if sharing.active_tasks.load(Ordering::Acquire) <= MIN_THREADS {
                    todo = sharing
                        .condvar
                        .wait(todo)
                        .unwrap_or_else(|e| e.into_inner());
                    true
                } else {
                    let (new_lock, waitres) = sharing
                        .condvar
                        .wait_timeout(todo, IDLE_THREAD_LINGER)
                        .unwrap_or_else(|e| e.into_inner());
                    todo = new_lock;
                    !waitres.timed_out()
                };

                if !received && todo.is_empty() {
                    return;
                }
            }

            task
        };

        run(task);
    }
}

impl Drop for TaskPool {
    fn drop(&mut self) {
        self.sharing
            .active_tasks
            .store(999_999_999, Ordering::Release);
        self.sharing.condvar.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::time::Instant;

    #[test]
    fn threads_beyond_the_minimum_exit_about_a_second_after_their_burst() {
        let pool = TaskPool::new();
        let burst = Arc::new(Barrier::new(9));
        for _ in 0..8 {
            let b = burst.clone();
            let _ = pool.spawn(Box::new(move || {
                b.wait();
            }));
        }
        burst.wait();
        let active = || pool.sharing.active_tasks.load(Ordering::Acquire);
        assert!(active() >= 8, "{} threads for 8 concurrent tasks", active());
        // Upstream's 5 s linger would keep them past this bound.
        let t0 = Instant::now();
        while active() > MIN_THREADS && t0.elapsed() < Duration::from_secs(4) {
            thread::sleep(Duration::from_millis(20));
        }
        // (Threads that time out together may all leave, the minimum's too: upstream's check.)
        assert!(active() <= MIN_THREADS, "{} after {:?}", active(), t0.elapsed());
    }
}
