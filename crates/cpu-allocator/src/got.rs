//! Redirecting one library's calls to `posix_memalign` and `free`: find it
//! among the loaded objects, walk its relocations (`DT_JMPREL` for calls
//! through the PLT, `DT_RELA` for `GLOB_DAT` slots where its code takes the
//! function's address) and overwrite the matching GOT slots. The originals
//! are taken from the C library itself (`dlsym`), not from the slots: with
//! lazy binding a slot may still hold the resolver's stub.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use crate::events::{on_alloc, on_free, refuse, RECORDING};
use crate::HookError;

type PosixMemalign = unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> c_int;
type Free = unsafe extern "C" fn(*mut c_void);

static REAL_POSIX_MEMALIGN: OnceLock<PosixMemalign> = OnceLock::new();
static REAL_FREE: OnceLock<Free> = OnceLock::new();
static INSTALLED: OnceLock<Result<usize, HookError>> = OnceLock::new();

unsafe extern "C" fn hook_posix_memalign(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
) -> c_int {
    let Some(real) = REAL_POSIX_MEMALIGN.get() else {
        return libc::ENOMEM;
    };
    if RECORDING.load(Ordering::Relaxed) && refuse(size as u64) {
        return libc::ENOMEM;
    }
    // SAFETY: the caller's arguments go unchanged to the real function.
    let r = unsafe { real(out, align, size) };
    if r == 0 && RECORDING.load(Ordering::Relaxed) && !out.is_null() {
        // SAFETY: on success posix_memalign wrote the block's address to *out.
        let p = unsafe { *out } as u64;
        on_alloc(p, size as u64);
    }
    r
}

unsafe extern "C" fn hook_free(p: *mut c_void) {
    // Recorded before the memory goes back: once freed, another thread may
    // get the same address, and its allocation must come after this free.
    if !p.is_null() && RECORDING.load(Ordering::Relaxed) {
        on_free(p as u64);
    }
    if let Some(real) = REAL_FREE.get() {
        // SAFETY: the pointer the caller gave, to the real free.
        unsafe { real(p) }
    }
}

pub(crate) fn install_once(library: &str) -> Result<usize, HookError> {
    INSTALLED
        .get_or_init(|| {
            // A child forked while another thread held the events' lock
            // would wait on it at its first allocation forever: children
            // (DataLoader workers, ...) do not record.
            // SAFETY: registering a handler that only stores to an atomic.
            unsafe { libc::pthread_atfork(None, None, Some(stop_in_child)) };
            install(library)
        })
        .clone()
}

extern "C" fn stop_in_child() {
    RECORDING.store(false, Ordering::SeqCst);
}

fn real_symbol(name: &'static CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with a NUL-terminated name and the default handle.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

fn install(library: &str) -> Result<usize, HookError> {
    let pm = real_symbol(c"posix_memalign").ok_or(HookError::NoSymbol("posix_memalign"))?;
    let fr = real_symbol(c"free").ok_or(HookError::NoSymbol("free"))?;
    // SAFETY: the symbols have these C signatures.
    unsafe {
        let _ = REAL_POSIX_MEMALIGN.set(std::mem::transmute::<*mut c_void, PosixMemalign>(pm));
        let _ = REAL_FREE.set(std::mem::transmute::<*mut c_void, Free>(fr));
    }
    let obj =
        find_object(library).ok_or_else(|| HookError::LibraryNotLoaded(library.to_owned()))?;
    let slots = obj.slots(&["posix_memalign", "free"]);
    if slots.iter().all(|(name, _)| *name != "posix_memalign")
        || slots.iter().all(|(name, _)| *name != "free")
    {
        let found: Vec<&str> = slots.iter().map(|(n, _)| *n).collect();
        return Err(HookError::NoSlots {
            library: obj.name.clone(),
            found: if found.is_empty() {
                "none".into()
            } else {
                found.join(", ")
            },
        });
    }
    for &(name, slot) in &slots {
        let hook = if name == "free" {
            hook_free as *const c_void as usize
        } else {
            hook_posix_memalign as *const c_void as usize
        };
        write_slot(slot, hook)?;
    }
    Ok(slots.len())
}

/// ELF64 records as laid out in memory (`<elf.h>`).
#[repr(C)]
struct Dyn {
    d_tag: i64,
    d_val: u64,
}

#[repr(C)]
struct Rela {
    r_offset: u64,
    r_info: u64,
    r_addend: i64,
}

#[repr(C)]
struct Sym {
    st_name: u32,
    st_info: u8,
    st_other: u8,
    st_shndx: u16,
    st_value: u64,
    st_size: u64,
}

/// A loaded object: its name, load base and dynamic section.
struct Object {
    name: String,
    base: usize,
    dynamic: *const Dyn,
}

struct Search<'a> {
    want: &'a str,
    found: Option<Object>,
}

unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info and our own data pointer.
    let (info, search) = unsafe { (&*info, &mut *(data as *mut Search)) };
    if info.dlpi_name.is_null() {
        return 0;
    }
    // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dlpi_name as *const c_char) }.to_string_lossy();
    let file = name.rsplit('/').next().unwrap_or(&name);
    if !file.starts_with(search.want) {
        return 0;
    }
    for i in 0..info.dlpi_phnum as usize {
        // SAFETY: dlpi_phdr has dlpi_phnum entries.
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        if ph.p_type == libc::PT_DYNAMIC {
            search.found = Some(Object {
                name: name.to_string(),
                base: info.dlpi_addr as usize,
                dynamic: (info.dlpi_addr as usize + ph.p_vaddr as usize) as *const Dyn,
            });
            return 1;
        }
    }
    0
}

fn find_object(library: &str) -> Option<Object> {
    let mut search = Search {
        want: library,
        found: None,
    };
    // SAFETY: the callback only reads what the loader hands it.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut search as *mut Search as *mut c_void) };
    search.found
}

const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_JMPREL: i64 = 23;
/// Relocation types of GOT slots: GLOB_DAT and JUMP_SLOT.
#[cfg(target_arch = "aarch64")]
const SLOT_KINDS: [u32; 2] = [1025, 1026];
#[cfg(not(target_arch = "aarch64"))]
const SLOT_KINDS: [u32; 2] = [6, 7];

impl Object {
    /// GOT slots (address) of the named functions, from both relocation tables.
    fn slots(&self, names: &[&'static str]) -> Vec<(&'static str, usize)> {
        let (mut strtab, mut symtab, mut rela, mut relasz, mut jmprel, mut pltrelsz) =
            (0, 0, 0, 0, 0, 0);
        let mut d = self.dynamic;
        // SAFETY: the dynamic section is an array ended by DT_NULL.
        unsafe {
            while (*d).d_tag != DT_NULL {
                let v = (*d).d_val as usize;
                // glibc relocates the address entries in place on most
                // architectures; where it does not they are offsets.
                let addr = if v < self.base { self.base + v } else { v };
                match (*d).d_tag {
                    DT_STRTAB => strtab = addr,
                    DT_SYMTAB => symtab = addr,
                    DT_RELA => rela = addr,
                    DT_RELASZ => relasz = v,
                    DT_JMPREL => jmprel = addr,
                    DT_PLTRELSZ => pltrelsz = v,
                    _ => {}
                }
                d = d.add(1);
            }
        }
        let mut out = Vec::new();
        if strtab == 0 || symtab == 0 {
            return out;
        }
        for (table, size) in [(jmprel, pltrelsz), (rela, relasz)] {
            if table == 0 {
                continue;
            }
            let n = size / std::mem::size_of::<Rela>();
            for i in 0..n {
                // SAFETY: the table holds `n` relocations.
                let r = unsafe { &*(table as *const Rela).add(i) };
                let kind = (r.r_info & 0xffff_ffff) as u32;
                if !SLOT_KINDS.contains(&kind) {
                    continue;
                }
                let sym_index = (r.r_info >> 32) as usize;
                // SAFETY: relocations index the symbol table, whose names are in strtab.
                let name = unsafe {
                    let sym = &*(symtab as *const Sym).add(sym_index);
                    CStr::from_ptr((strtab + sym.st_name as usize) as *const c_char)
                };
                if let Some(&want) = names.iter().find(|n| name.to_bytes() == n.as_bytes()) {
                    out.push((want, self.base + r.r_offset as usize));
                }
            }
        }
        out
    }
}

fn write_slot(slot: usize, value: usize) -> Result<(), HookError> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let start = slot & !(page - 1);
    let len = slot + std::mem::size_of::<usize>() - start;
    // SAFETY: the page holds the library's GOT, mapped for the process's
    // whole life; RELRO pages are read-only after relocation.
    let r = unsafe {
        libc::mprotect(
            start as *mut c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    };
    if r != 0 {
        return Err(HookError::Protect {
            addr: slot,
            reason: std::io::Error::last_os_error().to_string(),
        });
    }
    // SAFETY: the slot is an aligned pointer-sized word, now writable.
    unsafe { std::ptr::write_volatile(slot as *mut usize, value) };
    Ok(())
}
