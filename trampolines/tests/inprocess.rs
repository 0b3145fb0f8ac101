//! Installs real trampolines over real functions inside this test process and calls
//! them natively: results, every register and the stash frame are checked.
//!
//! Target functions and a register harness are assembled into one `region`
//! allocation (so the arena is within rel32 reach); memory is RW while written and
//! R-X while run, never both.

use dynasmrt::x64::X64Relocation;
use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi, VecAssembler};
use trampolines::arena::{ArenaHeader, RECORD_LEN};
use trampolines::x86_64::{
    build_hook, plan_patch, plan_patch_in, FunctionContext, HookMeta, StashFrame, StashLayout,
    StashedReg,
};

/// Registers in the order the harness loads and stores them.
const REGS: [&str; 15] = [
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
    "r15",
];
const RSP_BEFORE: usize = 15;
const RSP_AFTER: usize = 16;
const STACK_ARG: usize = 17;
const ALT_STACK: usize = 18;
const STATE_WORDS: usize = 19;
/// Bytes at the start of the image that stay writable: the entry-rsp slot and the
/// harness's private stack (growing down from the end of the page).
const DATA_PAGE: usize = 4096;

/// The allocation as a mutable byte slice (only while it is mapped read-write).
fn bytes_mut(mem: &mut region::Allocation) -> &mut [u8] {
    // SAFETY: the allocation is ours and mapped READ_WRITE whenever this is called.
    unsafe { std::slice::from_raw_parts_mut(mem.as_mut_ptr::<u8>(), mem.len()) }
}

struct Image {
    mem: region::Allocation,
    sum7: u64,
    riprel: u64,
    harness_sum7: u64,
    harness_riprel: u64,
    tiny: u64,
    harness_tiny: u64,
    rsp_slot: u64,
    arena: ArenaHeader,
}

/// Bytes of `tiny` (`lea eax, [rdi + 1]; ret`) and of the `int3` fill after it.
const TINY_LEN: usize = 4;
const TINY_FILL: usize = 12;

/// Assembles (after a writable data page): `sum7` (a+b+c+d+e+f+[rsp+8], records its entry rsp), `riprel`
/// (reads a constant RIP-relative first), and a harness per target that loads every
/// register from a state array, calls the target, and stores every register back.
fn build_image() -> Image {
    let mut mem = region::alloc(0x10000, region::Protection::READ_WRITE).unwrap();
    let base = mem.as_ptr::<u8>() as u64;
    let mut ops: VecAssembler<X64Relocation> = VecAssembler::new(base as usize);
    let rsp_slot = ops.new_dynamic_label();
    let data = ops.new_dynamic_label();
    let sum7 = ops.new_dynamic_label();
    let riprel = ops.new_dynamic_label();
    let tiny = ops.new_dynamic_label();
    dynasm!(ops
        ; .arch x64
        ; =>rsp_slot
        ; .u64 0
        ; .align 4096
        ; =>data
        ; .u64 0x1234_5678_9abc_def0
        ; .align 16
        ; =>sum7
        ; mov rax, rdi
        ; add rax, rsi
        ; add rax, rdx
        ; add rax, rcx
        ; add rax, r8
        ; add rax, r9
        ; add rax, [rsp + 8]
        ; mov [=>rsp_slot], rsp
        ; ret
        ; .align 16
        ; =>riprel
        ; mov rax, [=>data]
        ; xor rax, rdi
        ; mov [=>rsp_slot], rsp
        ; ret
        ; .align 16
        ; =>tiny
        ; lea eax, [rdi + 1]
        ; ret
        ; .bytes [0xcc; TINY_FILL]
    );
    let mut harness = |target: dynasmrt::DynamicLabel| {
        let entry = ops.offset();
        dynasm!(ops
            ; .arch x64
            ; .align 16
        );
        let _ = entry;
        let start = ops.offset();
        dynasm!(ops
            ; .arch x64
            ; push rbx ; push rbp ; push r12 ; push r13 ; push r14 ; push r15
            // Switch to the private stack so the stash frame survives the return.
            ; mov rax, rsp
            ; mov rsp, [rdi + 8 * ALT_STACK as i32]
            ; push rax
            ; push rdi
            ; mov [rdi + 8 * RSP_BEFORE as i32], rsp
            ; push 0
            ; push QWORD [rdi + 8 * STACK_ARG as i32]
            ; mov rax, [rdi]
            ; mov rbx, [rdi + 8]
            ; mov rcx, [rdi + 16]
            ; mov rdx, [rdi + 24]
            ; mov rsi, [rdi + 32]
            ; mov rbp, [rdi + 48]
            ; mov r8, [rdi + 56]
            ; mov r9, [rdi + 64]
            ; mov r10, [rdi + 72]
            ; mov r11, [rdi + 80]
            ; mov r12, [rdi + 88]
            ; mov r13, [rdi + 96]
            ; mov r14, [rdi + 104]
            ; mov r15, [rdi + 112]
            ; mov rdi, [rdi + 40]
            ; call =>target
            ; lea rsp, [rsp + 16]
            ; xchg rax, [rsp]
            ; mov [rax + 8], rbx
            ; mov [rax + 16], rcx
            ; mov [rax + 24], rdx
            ; mov [rax + 32], rsi
            ; mov [rax + 40], rdi
            ; mov [rax + 48], rbp
            ; mov [rax + 56], r8
            ; mov [rax + 64], r9
            ; mov [rax + 72], r10
            ; mov [rax + 80], r11
            ; mov [rax + 88], r12
            ; mov [rax + 96], r13
            ; mov [rax + 104], r14
            ; mov [rax + 112], r15
            ; mov [rax + 8 * RSP_AFTER as i32], rsp
            ; pop rcx
            ; mov [rax], rcx
            ; pop rsp
            ; pop r15 ; pop r14 ; pop r13 ; pop r12 ; pop rbp ; pop rbx
            ; ret
        );
        base + start.0 as u64
    };
    let harness_sum7 = harness(sum7);
    let harness_riprel = harness(riprel);
    let harness_tiny = harness(tiny);
    let labels = |l| base + ops.labels().resolve_dynamic(l).unwrap().0 as u64;
    let (sum7, riprel, tiny, rsp_slot) =
        (labels(sum7), labels(riprel), labels(tiny), labels(rsp_slot));
    let code = ops.finalize().unwrap();
    assert!(code.len() < 0x4000);
    bytes_mut(&mut mem)[..code.len()].copy_from_slice(&code);
    let arena = ArenaHeader::new(base + 0x4000, 4);
    assert!(arena.arena_len <= 0xc000);
    let header = arena.encode();
    bytes_mut(&mut mem)[0x4000..0x4000 + header.len()].copy_from_slice(&header);
    Image {
        mem,
        sum7,
        riprel,
        harness_sum7,
        harness_riprel,
        tiny,
        harness_tiny,
        rsp_slot,
        arena,
    }
}

impl Image {
    fn base(&self) -> u64 {
        self.mem.as_ptr::<u8>() as u64
    }

    fn set_writable(&mut self, writable: bool) {
        let p = if writable {
            region::Protection::READ_WRITE
        } else {
            region::Protection::READ_EXECUTE
        };
        // Page 0 holds the data slot the targets write and stays read-write.
        // SAFETY: the allocation is ours; nothing executes it while it is writable.
        unsafe {
            region::protect(
                self.mem.as_ptr::<u8>().add(DATA_PAGE),
                self.mem.len() - DATA_PAGE,
                p,
            )
            .unwrap()
        };
    }

    fn write(&mut self, addr: u64, bytes: &[u8]) {
        let off = (addr - self.base()) as usize;
        bytes_mut(&mut self.mem)[off..off + bytes.len()].copy_from_slice(bytes);
    }

    fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        let off = (addr - self.base()) as usize;
        // SAFETY: the allocation is readable (RW or RX) for its whole length while we own it.
        let all = unsafe { std::slice::from_raw_parts(self.mem.as_ptr::<u8>(), self.mem.len()) };
        all[off..off + len].to_vec()
    }

    fn hook(
        &mut self,
        function: u64,
        size: usize,
        slot: u32,
        stack_words: u16,
    ) -> trampolines::x86_64::HookCode {
        let code = self.read(function, size);
        let plan = plan_patch(function, &code).unwrap();
        self.install(&plan, size, slot, stack_words)
    }

    fn install(
        &mut self,
        plan: &trampolines::x86_64::PatchPlan,
        size: usize,
        slot: u32,
        stack_words: u16,
    ) -> trampolines::x86_64::HookCode {
        let meta = HookMeta {
            name: format!("f{slot}"),
            module: "inprocess".into(),
            function_size: size as u64,
            installed_ns: 1,
            variadic: false,
        };
        let hook = build_hook(
            plan,
            &self.arena,
            slot,
            StashLayout::new(stack_words),
            &meta,
        )
        .unwrap();
        self.set_writable(true);
        self.write(self.arena.slot_addr(slot), &hook.slot_bytes());
        self.write(self.arena.record_addr(slot), &hook.record.encode().unwrap());
        self.write(plan.patch_addr, &hook.patch);
        self.set_writable(false);
        hook
    }

    fn call(&self, harness: u64, state: &mut [u64; STATE_WORDS]) {
        // The private stack's top is the end of the writable data page.
        state[ALT_STACK] = self.base() + DATA_PAGE as u64;
        // SAFETY: `harness` is code assembled above with the C ABI taking one pointer;
        // it saves and restores the callee-saved registers it loads.
        let f: extern "C" fn(*mut u64) = unsafe { std::mem::transmute(harness as usize) };
        f(state.as_mut_ptr());
    }

    fn rsp_at_entry(&self) -> u64 {
        u64::from_le_bytes(self.read(self.rsp_slot, 8).try_into().unwrap())
    }
}

fn state(seed: u64) -> [u64; STATE_WORDS] {
    let mut s = [0u64; STATE_WORDS];
    for (i, v) in s.iter_mut().enumerate() {
        *v = seed
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(i as u32 * 5)
            ^ (i as u64 * 0x1111);
    }
    s
}

fn check_registers(before: &[u64; STATE_WORDS], after: &[u64; STATE_WORDS], rax: u64) {
    assert_eq!(after[0], rax, "rax (the result)");
    for i in 1..REGS.len() {
        assert_eq!(
            after[i], before[i],
            "{} changed across the hooked call",
            REGS[i]
        );
    }
    assert_eq!(after[RSP_AFTER], after[RSP_BEFORE], "rsp not restored");
}

#[test]
fn hooked_function_keeps_results_registers_and_stashes_arguments() {
    let mut img = build_image();
    img.set_writable(false);
    let expect = |s: &[u64; STATE_WORDS]| {
        // rdi, rsi, rdx, rcx, r8, r9 are state[5], [4], [3], [2], [7], [8]; stack arg is [17].
        [5, 4, 3, 2, 7, 8, STACK_ARG]
            .iter()
            .fold(0u64, |a, i| a.wrapping_add(s[*i]))
    };
    let mut unhooked = state(1);
    let before = unhooked;
    img.call(img.harness_sum7, &mut unhooked);
    check_registers(&before, &unhooked, expect(&before));

    let hook = img.hook(img.sum7, 40, 0, 1);
    for seed in 2..50 {
        let mut s = state(seed);
        let before = s;
        img.call(img.harness_sum7, &mut s);
        check_registers(&before, &s, expect(&before));

        // The original ran under the trampoline: its entry rsp holds the after-call address.
        let rsp = img.rsp_at_entry();
        assert_eq!(
            u64::from_le_bytes(img.read(rsp, 8).try_into().unwrap()),
            hook.trampoline.after_call()
        );
        let layout = StashLayout::new(1);
        let base = layout.base_from_callee_cfa(rsp + 8);
        let frame = StashFrame::parse(
            base,
            &layout,
            &img.read(base - layout.call_sp_offset(), layout.read_len()),
        )
        .unwrap();
        assert_eq!(
            frame.arguments(),
            [before[5], before[4], before[3], before[2], before[7], before[8]]
        );
        assert_eq!(frame.reg(StashedReg::Rax), before[0]);
        assert_eq!(frame.reg(StashedReg::R10), before[9]);
        assert_eq!(frame.stack_args, vec![before[STACK_ARG]]);
        assert_eq!(frame.record, img.arena.record_addr(0));
        assert_eq!(
            frame.saved_rbp, before[6],
            "the caller's rbp is saved in the frame"
        );
        assert_eq!(
            base % 16,
            0,
            "the frame base is 16-aligned, so rsp was aligned at the call"
        );
    }
    let record =
        trampolines::arena::HookRecord::decode(&img.read(img.arena.record_addr(0), RECORD_LEN))
            .unwrap();
    assert_eq!(record, hook.record);
}

#[test]
fn rip_relative_prologue_still_reads_its_data() {
    let mut img = build_image();
    img.set_writable(false);
    let hook = img.hook(img.riprel, 24, 1, 0);
    assert!(hook.relocated.code.len() >= hook.record.patch_len());
    for seed in 0..20 {
        let mut s = state(seed);
        let before = s;
        img.call(img.harness_riprel, &mut s);
        check_registers(&before, &s, 0x1234_5678_9abc_def0 ^ before[5]);
        let rsp = img.rsp_at_entry();
        let layout = StashLayout::new(0);
        let base = layout.base_from_callee_cfa(rsp + 8);
        let frame = StashFrame::parse(
            base,
            &layout,
            &img.read(base - layout.call_sp_offset(), layout.read_len()),
        )
        .unwrap();
        assert_eq!(frame.arguments()[0], before[5]);
    }
}

#[test]
fn restoring_original_bytes_unhooks() {
    let mut img = build_image();
    img.set_writable(false);
    let original = img.read(img.sum7, 16);
    let hook = img.hook(img.sum7, 40, 2, 1);
    assert_ne!(img.read(img.sum7, 16), original);
    img.set_writable(true);
    img.write(hook.record.patch_addr, &hook.record.original);
    img.set_writable(false);
    assert_eq!(img.read(img.sum7, 16), original);
    let mut s = state(7);
    let before = s;
    img.call(img.harness_sum7, &mut s);
    let rsp = img.rsp_at_entry();
    assert_ne!(
        u64::from_le_bytes(img.read(rsp, 8).try_into().unwrap()),
        hook.trampoline.after_call()
    );
    assert_eq!(
        s[0],
        [5, 4, 3, 2, 7, 8, STACK_ARG]
            .iter()
            .fold(0u64, |a, i| a.wrapping_add(before[*i]))
    );
}

#[test]
fn short_function_moved_whole_runs_from_the_relocated_copy() {
    let mut img = build_image();
    img.set_writable(false);
    let code = img.read(img.tiny, TINY_LEN);
    let fill = img.read(img.tiny + TINY_LEN as u64, TINY_FILL);
    assert_eq!(code, [0x8d, 0x47, 0x01, 0xc3], "lea eax,[rdi+1]; ret");
    // Four bytes: shorter than the patch; refused without the fill after it.
    assert!(plan_patch(img.tiny, &code).is_err());
    let ctx = FunctionContext {
        padding: &fill,
        ..FunctionContext::default()
    };
    let plan = plan_patch_in(img.tiny, &code, &ctx).unwrap();
    assert_eq!(plan.patch_len, 5);
    let hook = img.install(&plan, TINY_LEN, 3, 0);
    assert_eq!(img.read(img.tiny, 5), hook.patch);
    for seed in 0..20 {
        let mut s = state(seed);
        let before = s;
        img.call(img.harness_tiny, &mut s);
        // The relocated `ret` returns into the trampoline, which returns to the caller.
        check_registers(&before, &s, before[5].wrapping_add(1) & 0xffff_ffff);
    }
}
