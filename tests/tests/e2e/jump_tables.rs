//! The prologue analysis run on compiled code (no process): jump tables of a
//! real gcc `switch` in every build variant are found, bounded and read from
//! the file, and each hand-written edge case of edgefuncs.c gets the planned
//! outcome. objdump's disassembly is the independent oracle for instruction
//! boundaries.

use std::path::Path;

use argstash_tests::*;
use trampolines::error::PlanError;
use trampolines::x86_64::analysis::indirect_jumps;
use trampolines::x86_64::{plan_patch_in, FunctionContext, PatchPlan};

fn plan(exe: &Path, name: &str) -> Result<PatchPlan, PlanError> {
    let sym = symbol(exe, name).unwrap();
    let code = function_bytes(exe, name);
    let read = |addr: u64, len: usize| Some(file_bytes_at_vaddr(exe, addr, len));
    let ctx = FunctionContext {
        read_file: Some(&read),
        ..FunctionContext::default()
    };
    plan_patch_in(sym.addr, &code, &ctx)
}

#[test]
fn gcc_switch_tables_are_bounded_in_every_variant() {
    for v in Variant::all_with_cet() {
        let exe = build("edgefuncs", v);
        let sym = symbol(&exe, "dense_switch").unwrap();
        let code = function_bytes(&exe, "dense_switch");
        let read = |addr: u64, len: usize| Some(file_bytes_at_vaddr(&exe, addr, len));
        let jumps = indirect_jumps(sym.addr, &code, &read);
        assert_eq!(jumps.len(), 1, "{v}: {jumps:x?}");
        let targets = jumps[0]
            .targets
            .as_ref()
            .unwrap_or_else(|| panic!("{v}: the switch table was not bounded"));
        // Cases 0..7: eight entries, each on an instruction objdump sees.
        assert_eq!(targets.len(), 8, "{v}: {targets:x?}");
        let starts: Vec<u64> = disassemble(&exe, "dense_switch")
            .iter()
            .map(|i| i.addr)
            .collect();
        for t in targets {
            assert!(
                starts.contains(t),
                "{v}: target {t:#x} is not an instruction start"
            );
        }
        let p = plan(&exe, "dense_switch").unwrap_or_else(|e| panic!("{v}: {e}"));
        assert!(
            targets
                .iter()
                .all(|&t| t <= p.patch_addr || t >= p.patch_addr + p.patch_len as u64),
            "{v}"
        );
    }
}

#[test]
fn hand_written_edge_cases() {
    for v in [Variant::O2G, Variant::new(Opt::O0g, false)] {
        let exe = build("edgefuncs", v);
        let at = |name: &str| symbol(&exe, name).unwrap().addr;
        // table_into: table[0] = its ret, table[1] = +2.
        let err = plan(&exe, "table_into").unwrap_err();
        assert!(
            matches!(
                err,
                PlanError::TableIntoPatch {
                    to: 2,
                    patch_end: 5,
                    ..
                }
            ),
            "{v}: {err}"
        );
        let code = function_bytes(&exe, "table_into");
        let read = |addr: u64, len: usize| Some(file_bytes_at_vaddr(&exe, addr, len));
        let jumps = indirect_jumps(at("table_into"), &code, &read);
        let ret = disassemble(&exe, "table_into").last().unwrap().addr;
        assert_eq!(
            jumps[0].targets,
            Some(vec![ret, at("table_into") + 2]),
            "{v}"
        );
        // goto_two: unbounded, two instructions patched; goto_one: one instruction.
        assert!(
            matches!(
                plan(&exe, "goto_two").unwrap_err(),
                PlanError::UnboundedIndirectJump { .. }
            ),
            "{v}"
        );
        assert_eq!(plan(&exe, "goto_one").unwrap().patch_len, 5, "{v}");
        // The short ones need the bytes after them (the planner here gets none).
        assert!(matches!(
            plan(&exe, "short_fill").unwrap_err(),
            PlanError::TooShortNoPadding {
                size: 4,
                needed: 5,
                ..
            }
        ));
        let fill = file_bytes_at_vaddr(&exe, at("short_fill") + 4, 12);
        assert!(fill.iter().all(|&b| b == 0xcc), "{v}: {fill:02x?}");
        let code = function_bytes(&exe, "short_fill");
        let ctx = FunctionContext {
            padding: &fill,
            ..FunctionContext::default()
        };
        let p = plan_patch_in(at("short_fill"), &code, &ctx).unwrap();
        assert_eq!(p.original, [&code[..], &fill[..1]].concat());
    }
}
