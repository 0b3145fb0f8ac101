//! Constants the fixtures guarantee (see each fixture's header comment).

/// seed.c: main calls `foo(SEED_FOO_ARG)`.
pub const SEED_FOO_ARG: i64 = 5;
/// seed.c: foo calls `bar(SEED_BAR_ARG)` (= foo_arg + 23).
pub const SEED_BAR_ARG: i64 = 28;
/// seed.c: value `foo(5)` returns and main prints (`iter N result 58`).
pub const SEED_RESULT: i64 = 58;
/// threads.c: number of threads calling `work`.
pub const THREADS_WORKERS: usize = 8;
/// threads.c: total threads once ready (main + workers + "parked").
pub const THREADS_TOTAL: usize = 10;
/// threads.c: the argument the "parked" thread passes to `parked(long)`.
pub const THREADS_PARKED_TAG: i64 = 0x1122_3344_5566_7788;
/// sigwait.c: the argument the "sleeper" thread passes to `sleeper_fn`.
pub const SIGWAIT_SLEEPER_TAG: i64 = 0x51ee9;
/// manyargs.c: the eight arguments main passes to `eight` (g and h on the stack).
pub const MANYARGS_ARGS: [i64; 8] = [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88];
/// manyargs.c: what `eight` returns for them (a + 2b + ... + 8h).
pub const MANYARGS_RESULT: i64 = 0x11 * 204;
/// lifecycle.c: the tag the main loop passes to `nap`.
pub const LIFECYCLE_NAP_TAG: u64 = 0x4e41_500a;
/// lifecycle.c: the tag a forked child passes to `nap`.
pub const LIFECYCLE_CHILD_TAG: u64 = 0xc4_1d0a;
/// lifecycle.c: how deep `recurse` goes each round.
pub const LIFECYCLE_RECURSE_DEPTH: u64 = 10_000;
