//! Runs a call-through trampoline natively: it is called through a function
//! pointer, calls its target through the word in its slot, and the target finds
//! the stash frame where a reader would (its CFA plus the layout's call offset).
//!
//! Memory is RW while written and R-X while run, never both.

use dynasmrt::x64::X64Relocation;
use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi, VecAssembler};
use trampolines::arena::{Arena, ArenaHeader, HEADER_LEN, RECORD_LEN};
use trampolines::x86_64::{build_call_through, HookMeta, StashFrame, StashLayout, StashedReg};

/// Assembles `probe(a, b, c, buf, e, f)`: copies `len` bytes from its CFA (where the
/// stash read starts) into `buf`, returns `a ^ b ^ c` (all three arguments arrived).
fn probe(len: usize) -> region::Allocation {
    let mut mem = region::alloc(4096, region::Protection::READ_WRITE).unwrap();
    let mut ops: VecAssembler<X64Relocation> = VecAssembler::new(mem.as_ptr::<u8>() as usize);
    let len = len as i32;
    dynasm!(ops
        ; .arch x64
        ; lea r8, [rsp + 8]
        ; xor r9d, r9d
        ; ->copy:
        ; mov rax, [r8 + r9]
        ; mov [rcx + r9], rax
        ; add r9, 8
        ; cmp r9, len
        ; jb ->copy
        ; mov rax, rdi
        ; xor rax, rsi
        ; xor rax, rdx
        ; ret
    );
    let code = ops.finalize().unwrap();
    // SAFETY: the allocation is ours, mapped READ_WRITE and at least a page long.
    unsafe { std::slice::from_raw_parts_mut(mem.as_mut_ptr::<u8>(), code.len()) }
        .copy_from_slice(&code);
    // SAFETY: the allocation is ours and nothing runs from it yet.
    unsafe {
        region::protect(
            mem.as_ptr::<u8>(),
            mem.len(),
            region::Protection::READ_EXECUTE,
        )
    }
    .unwrap();
    mem
}

type Probe = extern "C" fn(u64, u64, u64, *mut u8, u64, u64) -> u64;

#[test]
fn called_through_a_pointer_it_stashes_and_calls_its_target() {
    let layout = StashLayout::new(0);
    let target = probe(layout.read_len());
    let target_addr = target.as_ptr::<u8>() as u64;

    let capacity = 1;
    let len = ArenaHeader::new(0, capacity).arena_len as usize;
    let mut mem = region::alloc(len, region::Protection::READ_WRITE).unwrap();
    let header = ArenaHeader::new(mem.as_ptr::<u8>() as u64, capacity);
    let meta = HookMeta {
        name: "probe".into(),
        ..HookMeta::default()
    };
    let code = build_call_through(&header, 0, target_addr, layout, &meta).unwrap();
    {
        // SAFETY: the allocation is ours, mapped READ_WRITE, `len` bytes long.
        let bytes = unsafe { std::slice::from_raw_parts_mut(mem.as_mut_ptr::<u8>(), len) };
        bytes[..HEADER_LEN].copy_from_slice(&header.encode());
        bytes[HEADER_LEN..HEADER_LEN + RECORD_LEN].copy_from_slice(&code.record.encode().unwrap());
        let slot = (header.slot_addr(0) - header.base) as usize;
        bytes[slot..slot + code.slot_bytes().len()].copy_from_slice(&code.slot_bytes());
    }
    // SAFETY: the arena is ours; nothing runs from it while it is writable.
    unsafe { region::protect(mem.as_ptr::<u8>(), len, region::Protection::READ_EXECUTE) }.unwrap();

    // SAFETY: the arena is mapped R-X and the slot holds a complete trampoline with the
    // C calling convention of `probe`, which it calls with the same arguments.
    let hooked: Probe = unsafe { std::mem::transmute(code.trampoline.address as usize) };
    let mut buf = vec![0u8; layout.read_len()];
    let (a, b, c) = (0x1111_2222_3333_4444, 0x0f0f_0f0f, 7);
    let (e, f) = (0x5555_aaaa_5555_aaaa, u64::MAX);
    let got = std::hint::black_box(hooked)(a, b, c, buf.as_mut_ptr(), e, f);
    assert_eq!(got, a ^ b ^ c);

    // The bytes were read at the probe's CFA: the stash read start.
    let frame = StashFrame::parse(layout.base_from_callee_cfa(0), &layout, &buf).unwrap();
    assert_eq!(frame.reg(StashedReg::Rdi), a);
    assert_eq!(frame.reg(StashedReg::Rsi), b);
    assert_eq!(frame.reg(StashedReg::Rdx), c);
    assert_eq!(frame.reg(StashedReg::Rcx), buf.as_ptr() as u64);
    assert_eq!(frame.arguments()[4..], [e, f]);
    assert_eq!(frame.record, header.record_addr(0));

    // A reader that rediscovers the arena from memory alone finds the hook.
    // SAFETY: the arena is mapped readable for `header_len` bytes.
    let image =
        unsafe { std::slice::from_raw_parts(header.base as *const u8, header.header_len()) };
    let arena = Arena::decode(header.base, image).unwrap();
    let record = arena.by_after_call(code.trampoline.after_call()).unwrap();
    assert!(record.is_call_through());
    assert_eq!(record.function, target_addr);
}
