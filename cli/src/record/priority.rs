//! The sampling thread's scheduling: real-time (`SCHED_FIFO`, lowest priority,
//! through [`injector::Realtime`]) while it samples. On a machine whose CPUs are
//! all busy, a sampler of normal priority wakes late and rounds fall behind
//! schedule; a real-time one starts each round on time. It sleeps between rounds,
//! and the kernel's real-time throttling (95% of a CPU) bounds it should it ever
//! spin.

/// Keeps the sampling thread off the CPUs its targets run on.
///
/// Releasing a sampled thread wakes it, and the kernel likes to queue a woken
/// thread on the CPU of the thread that woke it: the sampler's. The sampler's
/// next wake-up there then preempts it, every time, and a preempted thread is
/// no fair sample (see `fair` in mod.rs), so on a busy machine nearly every
/// sample was left out (8 of 297 at 99 Hz, with three other busy processes on
/// two CPUs). Moving to another CPU before sleeping keeps the two apart.
pub struct Placement {
    allowed: Vec<usize>,
    current: Vec<usize>,
}

impl Placement {
    /// The calling thread's CPUs now (restored on drop).
    pub fn new() -> Option<Placement> {
        let set = get_affinity()?;
        Some(Placement {
            current: set.clone(),
            allowed: set,
        })
    }

    /// Lets the calling thread run on its allowed CPUs except `busy` (all of
    /// them when that leaves none).
    pub fn avoid(&mut self, busy: &[u32]) {
        let mut want: Vec<usize> = self
            .allowed
            .iter()
            .copied()
            .filter(|c| !busy.contains(&(*c as u32)))
            .collect();
        if want.is_empty() {
            want = self.allowed.clone();
        }
        if want != self.current && set_affinity(&want) {
            self.current = want;
        }
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        if self.current != self.allowed {
            set_affinity(&self.allowed);
        }
    }
}

/// The calling thread's allowed CPUs.
fn get_affinity() -> Option<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; all zeroes is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; the kernel writes at most
    // size_of::<cpu_set_t>() bytes into `set`, a live local.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return None;
    }
    let n = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET reads `set` for a CPU number below its capacity.
    Some(
        (0..n)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect(),
    )
}

/// Sets the calling thread's allowed CPUs; whether that worked.
fn set_affinity(cpus: &[usize]) -> bool {
    // SAFETY: cpu_set_t is plain data; all zeroes is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: `c` came from get_affinity, so it is below the set's capacity.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; the kernel reads `set`, a live local.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
}
