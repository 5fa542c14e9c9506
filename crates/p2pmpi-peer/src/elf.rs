//! What the launcher and `p2pmpi abi-check` read of an ELF file (64-bit, little-endian): its
//! dynamic section (the libraries it needs, its RPATH and RUNPATH) and its dynamic symbols
//! (those it imports, those it defines, and the bytes of a defined data symbol). Malformed
//! input is an error, never a panic: every offset and size is checked against the file.
//! [`crate::ldso`] follows the dynamic loader's search through these files.

use anyhow::{bail, Result};
use std::path::Path;

const SHT_DYNAMIC: u32 = 6;
const SHT_NOBITS: u32 = 8;
const SHT_DYNSYM: u32 = 11;
const DT_NEEDED: u64 = 1;
const DT_SONAME: u64 = 14;
const DT_RPATH: u64 = 15;
const DT_RUNPATH: u64 = 29;
const DT_FLAGS_1: u64 = 0x6fff_fffb;
/// DT_FLAGS_1: the default directories (and the cache) are not searched for its needs.
const DF_1_NODEFLIB: u64 = 0x800;

/// A dynamic symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    pub name: String,
    /// Defined here (not an import).
    pub defined: bool,
    /// Its section's index, address and size (defined symbols).
    section: usize,
    value: u64,
    size: u64,
}

/// A section header's fields used here.
#[derive(Debug, Clone, Copy)]
struct Section {
    kind: u32,
    addr: u64,
    offset: u64,
    size: u64,
    link: u32,
}

/// An ELF file read whole.
pub struct Elf {
    data: Vec<u8>,
    sections: Vec<Section>,
}

fn u16_at(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(d.get(at..at.checked_add(2)?)?.try_into().ok()?))
}
fn u32_at(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(d.get(at..at.checked_add(4)?)?.try_into().ok()?))
}
fn u64_at(d: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(d.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// Whether `data` starts as an ELF file does.
pub fn is_elf(data: &[u8]) -> bool {
    data.starts_with(b"\x7fELF")
}

impl Elf {
    /// Reads `path` (an error names it and what is wrong).
    pub fn read(path: &Path) -> Result<Elf> {
        let data = std::fs::read(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        Elf::parse(data).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    /// Reads of `path` only what [`Elf::needed`], [`Elf::search_paths`] and [`Elf::symbols`]
    /// look at: the header, the section headers, the dynamic and dynamic-symbol sections and
    /// their string tables (the launcher reads every program it starts: a whole 24 MB binary
    /// cost a job's start-up 13 ms). The other bytes read as zeros.
    pub fn read_dynamic(path: &Path) -> Result<Elf> {
        Elf::read_parts(path, &[SHT_DYNAMIC, SHT_DYNSYM])
    }

    /// Reads of `path` only its dynamic section and the section's strings: what
    /// [`Elf::needed`], [`Elf::soname`], [`Elf::search_paths`] and [`Elf::nodeflib`] look at
    /// (following a program's libraries reads each of them).
    pub fn read_dynamic_section(path: &Path) -> Result<Elf> {
        Elf::read_parts(path, &[SHT_DYNAMIC])
    }

    fn read_parts(path: &Path, kinds: &[u32]) -> Result<Elf> {
        use std::os::unix::fs::FileExt;
        let named = |e: anyhow::Error| anyhow::anyhow!("{}: {e}", path.display());
        let f = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        let len = usize::try_from(f.metadata()?.len())?;
        // Zeroed pages cost nothing until written.
        let mut data = vec![0u8; len];
        let fill = |data: &mut [u8], off: u64, n: u64| -> Result<()> {
            let start = usize::try_from(off)?;
            let end = start.checked_add(usize::try_from(n)?).filter(|e| *e <= data.len());
            let end = end.ok_or_else(|| anyhow::anyhow!("a section lies past the end of the file"))?;
            f.read_exact_at(&mut data[start..end], off)?;
            Ok(())
        };
        fill(&mut data, 0, len.min(64) as u64).map_err(named)?;
        if is_elf(&data) && len >= 64 {
            let shoff = u64_at(&data, 0x28).unwrap_or(0);
            let table = u64::from(u16_at(&data, 0x3A).unwrap_or(0)) * u64::from(u16_at(&data, 0x3C).unwrap_or(0));
            fill(&mut data, shoff, table).map_err(named)?;
        }
        let mut elf = Elf::parse(data).map_err(named)?;
        let wanted: Vec<Section> = elf.sections.iter().filter(|s| kinds.contains(&s.kind)).copied().collect();
        for s in wanted {
            let linked = elf.sections.get(s.link as usize).copied();
            for t in std::iter::once(s).chain(linked).filter(|t| t.kind != SHT_NOBITS) {
                fill(&mut elf.data, t.offset, t.size).map_err(named)?;
            }
        }
        Ok(elf)
    }

    pub fn parse(data: Vec<u8>) -> Result<Elf> {
        if !is_elf(&data) {
            bail!("not an ELF file");
        }
        if data.get(4) != Some(&2) || data.get(5) != Some(&1) {
            bail!("not a 64-bit little-endian ELF file");
        }
        let bad = || anyhow::anyhow!("truncated or malformed ELF header");
        let shoff = usize::try_from(u64_at(&data, 0x28).ok_or_else(bad)?)?;
        let shentsize = usize::from(u16_at(&data, 0x3A).ok_or_else(bad)?);
        let shnum = usize::from(u16_at(&data, 0x3C).ok_or_else(bad)?);
        if shnum > 0 && shentsize < 64 {
            bail!("section headers of {shentsize} bytes");
        }
        let mut sections = Vec::with_capacity(shnum);
        for i in 0..shnum {
            let at = i.checked_mul(shentsize).and_then(|o| o.checked_add(shoff)).ok_or_else(bad)?;
            if at > data.len() {
                return Err(bad());
            }
            let s = Section {
                kind: u32_at(&data, at + 4).ok_or_else(bad)?,
                addr: u64_at(&data, at + 16).ok_or_else(bad)?,
                offset: u64_at(&data, at + 24).ok_or_else(bad)?,
                size: u64_at(&data, at + 32).ok_or_else(bad)?,
                link: u32_at(&data, at + 40).ok_or_else(bad)?,
            };
            sections.push(s);
        }
        Ok(Elf { data, sections })
    }

    /// The bytes of section `s` (none for NOBITS sections).
    fn bytes(&self, s: &Section) -> Result<&[u8]> {
        if s.kind == SHT_NOBITS {
            return Ok(&[]);
        }
        let start = usize::try_from(s.offset)?;
        let end = start.checked_add(usize::try_from(s.size)?).ok_or_else(|| anyhow::anyhow!("section past the end"))?;
        self.data.get(start..end).ok_or_else(|| anyhow::anyhow!("a section lies past the end of the file"))
    }

    /// The string at `at` of string table `table` (a section index).
    fn string(&self, table: u32, at: u64) -> Result<String> {
        let s = self.sections.get(table as usize).ok_or_else(|| anyhow::anyhow!("no string table {table}"))?;
        let bytes = self.bytes(s)?;
        let rest = bytes.get(usize::try_from(at)?..).ok_or_else(|| anyhow::anyhow!("string past its table"))?;
        let end = rest.iter().position(|&b| b == 0).ok_or_else(|| anyhow::anyhow!("unterminated string"))?;
        Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
    }

    /// The dynamic section's entries of `tag`, as strings.
    fn dynamic_strings(&self, tag: u64) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for s in self.sections.iter().filter(|s| s.kind == SHT_DYNAMIC) {
            for e in self.bytes(s)?.chunks_exact(16) {
                let (t, v) = (u64_at(e, 0).unwrap_or(0), u64_at(e, 8).unwrap_or(0));
                if t == tag {
                    out.push(self.string(s.link, v)?);
                }
            }
        }
        Ok(out)
    }

    /// The libraries it needs (DT_NEEDED).
    pub fn needed(&self) -> Result<Vec<String>> {
        self.dynamic_strings(DT_NEEDED)
    }

    /// Its DT_SONAME.
    pub fn soname(&self) -> Result<Option<String>> {
        Ok(self.dynamic_strings(DT_SONAME)?.into_iter().next())
    }

    /// Whether its DT_FLAGS_1 has DF_1_NODEFLIB (its needs are not looked for in the loader's
    /// cache and default directories).
    pub fn nodeflib(&self) -> Result<bool> {
        for s in self.sections.iter().filter(|s| s.kind == SHT_DYNAMIC) {
            for e in self.bytes(s)?.chunks_exact(16) {
                if u64_at(e, 0) == Some(DT_FLAGS_1) && u64_at(e, 8).unwrap_or(0) & DF_1_NODEFLIB != 0 {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Its DT_RPATH and DT_RUNPATH as written (their entries separated by `:`, empty ones kept:
    /// the loader takes them for the current directory).
    pub fn raw_search_paths(&self) -> Result<(Option<String>, Option<String>)> {
        let first = |v: Vec<String>| v.into_iter().next();
        Ok((first(self.dynamic_strings(DT_RPATH)?), first(self.dynamic_strings(DT_RUNPATH)?)))
    }

    /// The directories of its DT_RPATH (searched before LD_LIBRARY_PATH, when it has no
    /// DT_RUNPATH) and of its DT_RUNPATH (searched after).
    pub fn search_paths(&self) -> Result<(Vec<String>, Vec<String>)> {
        let split =
            |v: Vec<String>| v.iter().flat_map(|p| p.split(':')).filter(|p| !p.is_empty()).map(String::from).collect();
        Ok((split(self.dynamic_strings(DT_RPATH)?), split(self.dynamic_strings(DT_RUNPATH)?)))
    }

    /// Its dynamic symbols.
    pub fn symbols(&self) -> Result<Vec<Symbol>> {
        let mut out = Vec::new();
        for s in self.sections.iter().filter(|s| s.kind == SHT_DYNSYM) {
            for e in self.bytes(s)?.chunks_exact(24) {
                let name = self.string(s.link, u64::from(u32_at(e, 0).unwrap_or(0)))?;
                if name.is_empty() {
                    continue;
                }
                let section = usize::from(u16_at(e, 6).unwrap_or(0));
                let (value, size) = (u64_at(e, 8).unwrap_or(0), u64_at(e, 16).unwrap_or(0));
                out.push(Symbol { name, defined: section != 0, section, value, size });
            }
        }
        Ok(out)
    }

    /// The bytes of defined data symbol `sym` (in the file, as initialised).
    pub fn symbol_bytes(&self, sym: &Symbol) -> Result<&[u8]> {
        let s = self.sections.get(sym.section).ok_or_else(|| anyhow::anyhow!("{}: no section", sym.name))?;
        let bytes = self.bytes(s)?;
        let start =
            sym.value.checked_sub(s.addr).ok_or_else(|| anyhow::anyhow!("{}: outside its section", sym.name))?;
        let start = usize::try_from(start)?;
        let end =
            start.checked_add(usize::try_from(sym.size)?).ok_or_else(|| anyhow::anyhow!("{}: too big", sym.name))?;
        bytes.get(start..end).ok_or_else(|| anyhow::anyhow!("{}: outside its section", sym.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_test_binary_reads_and_garbage_is_refused() {
        let me = Elf::read(&std::env::current_exe().unwrap()).unwrap();
        assert!(me.needed().unwrap().iter().any(|n| n.starts_with("libc.so")));
        assert!(me.symbols().unwrap().iter().any(|s| !s.defined && s.name == "malloc"));
        assert!(Elf::parse(b"#!/bin/sh\n".to_vec()).is_err());
        // Reading only the dynamic parts gives the same libraries, paths and symbols.
        let part = Elf::read_dynamic(&std::env::current_exe().unwrap()).unwrap();
        assert_eq!(part.needed().unwrap(), me.needed().unwrap());
        assert_eq!(part.search_paths().unwrap(), me.search_paths().unwrap());
        assert_eq!(part.symbols().unwrap(), me.symbols().unwrap());
        let dir = std::env::temp_dir().join(format!("p2pmpi-elf-test-{}", std::process::id()));
        std::fs::write(&dir, b"\x7fELF\x02\x01").unwrap();
        assert!(Elf::read_dynamic(&dir).is_err(), "a truncated file is refused");
        std::fs::remove_file(&dir).unwrap();
        // Every truncation of a real file is refused or read without panicking.
        let data = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        for cut in [5, 64, 0x40, 200, data.len() / 2] {
            if let Ok(e) = Elf::parse(data[..cut].to_vec()) {
                let _ = e.needed();
                let _ = e.symbols();
            }
        }
        // Section headers pointing past the end.
        let mut bad = data[..64].to_vec();
        bad[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        bad[0x3C..0x3E].copy_from_slice(&3u16.to_le_bytes());
        assert!(Elf::parse(bad).is_err());
    }
}
