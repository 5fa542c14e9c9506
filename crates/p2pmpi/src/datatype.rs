//! Datatypes: how values are laid out in memory, with rsmpi's traits and handle types.
//!
//! A datatype is a *type map* ([`TypeMap`]): byte blocks at offsets from a base address, plus
//! the lower bound and extent that place consecutive elements. Primitive types are one block;
//! [`UserDatatype`] constructors (contiguous, vector, indexed, structured) compose maps, and
//! `#[derive(Equivalence)]` builds a structured map from a struct's field offsets. A map with a
//! single block covering its whole extent is *contiguous*: such buffers are sent straight from
//! and received straight into user memory; other maps are packed (gaps such as struct padding
//! are never read or written).
//!
//! All hosts of a job are assumed to share byte order and type sizes (x86-64/aarch64
//! little-endian); data travels as raw bytes.

use crate::raw::{AsRaw, FromRaw, MatchesRaw};
use crate::Count;
use std::os::raw::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

/// `MPI_Aint`: a byte displacement.
pub type Address = isize;

/// The primitive kinds data is made of. Reductions need them: `SUM` on `i32` and on `f32`
/// differ although both are 4 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Primitive {
    Bool,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    I128,
    U128,
    F32,
    F64,
    /// A complex number of two `f32`.
    C32,
    /// A complex number of two `f64`.
    C64,
    /// C's `long double` on x86_64: x87's 80-bit extended float, stored in 16 bytes (the last
    /// 6 padding); reduced in 80-bit precision (x87 instructions, x86_64 only).
    F80,
    /// A complex number of two [`Primitive::F80`] (C's `long double _Complex`, 32 bytes).
    C80,
}

impl Primitive {
    /// Size in bytes.
    pub const fn size(self) -> usize {
        match self {
            Primitive::Bool | Primitive::I8 | Primitive::U8 => 1,
            Primitive::I16 | Primitive::U16 => 2,
            Primitive::I32 | Primitive::U32 | Primitive::F32 => 4,
            Primitive::I64 | Primitive::U64 | Primitive::F64 | Primitive::C32 => 8,
            Primitive::I128 | Primitive::U128 | Primitive::C64 | Primitive::F80 => 16,
            Primitive::C80 => 32,
        }
    }
    const fn align(self) -> usize {
        match self {
            Primitive::C32 => 4,
            Primitive::C64 => 8,
            Primitive::F80 | Primitive::C80 => 16,
            p => p.size(),
        }
    }
}

/// A run of data of one primitive kind inside an element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Offset from the element's base.
    pub offset: isize,
    /// Length in bytes (a multiple of the kind's size).
    pub len: usize,
    /// What the bytes are.
    pub kind: Primitive,
}

/// The layout of one element of a datatype: typed blocks at offsets, lower bound and extent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeMap {
    /// The data blocks, in order (the order defines the packed layout).
    blocks: std::borrow::Cow<'static, [Block]>,
    /// Bytes of data in one element (sum of block lengths).
    size: usize,
    /// Lower bound.
    lb: isize,
    /// Extent (distance between consecutive elements).
    extent: isize,
    /// Alignment of the strictest primitive inside (struct extents are rounded up to it).
    align: usize,
}

impl TypeMap {
    /// The map of one primitive value.
    pub const fn primitive(kind: Primitive) -> TypeMap {
        let blocks: &'static [Block] = match kind {
            Primitive::Bool => &[Block { offset: 0, len: 1, kind: Primitive::Bool }],
            Primitive::I8 => &[Block { offset: 0, len: 1, kind: Primitive::I8 }],
            Primitive::U8 => &[Block { offset: 0, len: 1, kind: Primitive::U8 }],
            Primitive::I16 => &[Block { offset: 0, len: 2, kind: Primitive::I16 }],
            Primitive::U16 => &[Block { offset: 0, len: 2, kind: Primitive::U16 }],
            Primitive::I32 => &[Block { offset: 0, len: 4, kind: Primitive::I32 }],
            Primitive::U32 => &[Block { offset: 0, len: 4, kind: Primitive::U32 }],
            Primitive::I64 => &[Block { offset: 0, len: 8, kind: Primitive::I64 }],
            Primitive::U64 => &[Block { offset: 0, len: 8, kind: Primitive::U64 }],
            Primitive::I128 => &[Block { offset: 0, len: 16, kind: Primitive::I128 }],
            Primitive::U128 => &[Block { offset: 0, len: 16, kind: Primitive::U128 }],
            Primitive::F32 => &[Block { offset: 0, len: 4, kind: Primitive::F32 }],
            Primitive::F64 => &[Block { offset: 0, len: 8, kind: Primitive::F64 }],
            Primitive::C32 => &[Block { offset: 0, len: 8, kind: Primitive::C32 }],
            Primitive::C64 => &[Block { offset: 0, len: 16, kind: Primitive::C64 }],
            Primitive::F80 => &[Block { offset: 0, len: 16, kind: Primitive::F80 }],
            Primitive::C80 => &[Block { offset: 0, len: 32, kind: Primitive::C80 }],
        };
        let size = kind.size();
        TypeMap { blocks: std::borrow::Cow::Borrowed(blocks), size, lb: 0, extent: size as isize, align: kind.align() }
    }

    fn from_blocks(raw: Vec<Block>, lb: isize, ub: isize, align: usize) -> TypeMap {
        // Merge adjacent blocks of the same kind (keeping order).
        let mut blocks: Vec<Block> = Vec::with_capacity(raw.len());
        for b in raw.into_iter().filter(|b| b.len > 0) {
            match blocks.last_mut() {
                Some(last) if last.offset + last.len as isize == b.offset && last.kind == b.kind => last.len += b.len,
                _ => blocks.push(b),
            }
        }
        let size = blocks.iter().map(|b| b.len).sum();
        TypeMap { blocks: std::borrow::Cow::Owned(blocks), size, lb, extent: ub - lb, align }
    }

    /// The typed blocks of one element, in packing order.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// Bytes of data in one element (`MPI_Type_size`).
    pub fn size(&self) -> usize {
        self.size
    }
    /// Extent of one element (`MPI_Type_get_extent`).
    pub fn extent(&self) -> isize {
        self.extent
    }
    /// Lower bound.
    pub fn lb(&self) -> isize {
        self.lb
    }
    /// Upper bound.
    pub fn ub(&self) -> isize {
        self.lb + self.extent
    }
    /// Whether `count` elements occupy exactly `count * size` bytes with no gap: such
    /// buffers are sent and received in place.
    pub fn is_contiguous(&self) -> bool {
        if self.lb != 0 || self.extent != self.size as isize {
            return false;
        }
        let mut pos = 0isize;
        for b in self.blocks.iter() {
            if b.offset != pos {
                return false;
            }
            pos += b.len as isize;
        }
        true
    }
    /// The single kind every block has, if the data is homogeneous.
    pub fn homogeneous(&self) -> Option<Primitive> {
        let k = self.blocks.first()?.kind;
        self.blocks.iter().all(|b| b.kind == k).then_some(k)
    }

    /// The map of copies of other maps placed at byte displacements
    /// (`(displacement, repetitions, map)`), the building block of every constructor.
    fn compose(parts: &[(isize, usize, &TypeMap)]) -> TypeMap {
        let mut raw = Vec::new();
        let mut align = 1;
        let (mut lb, mut ub) = (isize::MAX, isize::MIN);
        for &(disp, reps, old) in parts {
            if reps == 0 {
                continue;
            }
            match &old.blocks[..] {
                // Copies of one run that fills its extent (`MPI_Type_contiguous(n, MPI_BYTE)`)
                // are one run, however many (merged below anyway, but without a block each).
                [b] if b.offset == old.lb && b.len as isize == old.extent => {
                    raw.push(Block { offset: disp + b.offset, len: b.len * reps, kind: b.kind });
                }
                blocks => {
                    for i in 0..reps as isize {
                        let base = disp + i * old.extent;
                        for b in blocks {
                            raw.push(Block { offset: base + b.offset, ..*b });
                        }
                    }
                }
            }
            align = align.max(old.align);
            lb = lb.min(disp + old.lb);
            ub = ub.max(disp + old.lb + reps as isize * old.extent);
        }
        if lb > ub {
            lb = 0;
            ub = 0;
        }
        TypeMap::from_blocks(raw, lb, ub, align)
    }

    /// A struct's map: the extent is padded to the strictest alignment inside, as
    /// `MPI_Type_create_struct` does, so that arrays of the struct line up.
    fn padded(mut self) -> TypeMap {
        let a = self.align as isize;
        let rem = self.extent.rem_euclid(a);
        if rem != 0 {
            self.extent += a - rem;
        }
        self
    }

    /// Whether some data of the layout is `bool` (the one primitive kind with invalid bit
    /// patterns: only bytes 0 and 1 are `bool` values).
    pub fn has_bool(&self) -> bool {
        self.blocks.iter().any(|b| b.kind == Primitive::Bool)
    }

    /// Whether received bytes may be written straight into user memory of this layout:
    /// contiguous, and without `bool` data (bytes received for a `bool` are staged and
    /// unpacked, which turns any non-zero byte into `true`, so that no other byte value ever
    /// lands in a `bool`).
    pub fn receives_in_place(&self) -> bool {
        self.is_contiguous() && !self.has_bool()
    }

    /// Makes the `bool` data of packed elements valid: any non-zero byte becomes 1 (`true`),
    /// as in C's conversion to `_Bool`. `packed` holds whole packed elements of this layout
    /// (a trailing partial element is fixed as far as it goes).
    pub fn fix_bools(&self, packed: &mut [u8]) {
        if !self.has_bool() || self.size == 0 {
            return;
        }
        for element in packed.chunks_mut(self.size) {
            let mut pos = 0;
            for b in self.blocks.iter() {
                let end = (pos + b.len).min(element.len());
                if b.kind == Primitive::Bool {
                    for byte in &mut element[pos..end] {
                        *byte = (*byte != 0) as u8;
                    }
                }
                pos = end;
            }
        }
    }

    /// Copies `count` elements at `src` into the packed buffer `out`.
    ///
    /// # Safety
    /// `src` must point to `count` valid elements of this layout: for each element `i` and
    /// block `b`, the `b.len` bytes at `src + i * extent + b.offset` must be readable and
    /// initialised (gaps between blocks, such as struct padding, are never read).
    pub unsafe fn pack(&self, src: *const u8, count: usize, out: &mut Vec<u8>) {
        if self.is_contiguous() {
            // SAFETY: contiguous: element i's data is the `size` bytes at `src + i * size`
            // (lb 0, extent == size, blocks back to back from 0), so the `count` elements are
            // `count * size` initialised bytes at `src`, readable per the caller's contract.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(src, count * self.size) });
            return;
        }
        out.reserve(count * self.size);
        for i in 0..count as isize {
            for b in self.blocks.iter() {
                // SAFETY: this is block `b` of element `i`, which the caller guarantees to be
                // readable and initialised (and thus inside one allocation with `src`, so the
                // offset arithmetic stays in bounds).
                let block = unsafe { std::slice::from_raw_parts(src.offset(i * self.extent + b.offset), b.len) };
                out.extend_from_slice(block);
            }
        }
    }

    /// Copies packed data into `count` elements at `dst`; returns the bytes consumed. Stops
    /// at the first block that `packed` does not hold whole (a short message leaves the rest
    /// of `dst` as it was). `bool` data is made valid on the way (see [`Self::fix_bools`]).
    ///
    /// # Safety
    /// `dst` must point to `count` elements of this layout whose data blocks are writable
    /// (for each element `i` and block `b`, the `b.len` bytes at `dst + i * extent +
    /// b.offset`); they need not be initialised. Every bit pattern written must be valid for
    /// the memory it lands in — true of every [`Equivalence`] type's own datatype.
    pub unsafe fn unpack(&self, packed: &[u8], dst: *mut u8, count: usize) -> usize {
        let mut pos = 0;
        'outer: for i in 0..count as isize {
            for b in self.blocks.iter() {
                if pos + b.len > packed.len() {
                    break 'outer;
                }
                let src = &packed[pos..pos + b.len];
                // SAFETY: block `b` of element `i`, writable per the caller's contract (and
                // inside one allocation with `dst`, so the offset stays in bounds).
                let to = unsafe { dst.offset(i * self.extent + b.offset) };
                if b.kind == Primitive::Bool {
                    for (k, &byte) in src.iter().enumerate() {
                        // SAFETY: byte `k < b.len` of the writable block; a u8 store needs no
                        // alignment, and 0 or 1 is a valid `bool`.
                        unsafe { to.add(k).write((byte != 0) as u8) };
                    }
                } else {
                    // SAFETY: `src` is `b.len` bytes of `packed`, `to` the writable block of
                    // `b.len` bytes; `packed` is a shared borrow, so it cannot overlap the
                    // memory the caller lets this function write.
                    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), to, b.len) };
                }
                pos += b.len;
            }
        }
        pos
    }
}

macro_rules! primitive_maps {
    ($($name:ident = $k:ident;)*) => { $( pub(crate) static $name: TypeMap = TypeMap::primitive(Primitive::$k); )* };
}
primitive_maps! {
    MAP_BOOL = Bool; MAP_I8 = I8; MAP_U8 = U8; MAP_I16 = I16; MAP_U16 = U16; MAP_I32 = I32;
    MAP_U32 = U32; MAP_I64 = I64; MAP_U64 = U64; MAP_I128 = I128; MAP_U128 = U128; MAP_F32 = F32;
    MAP_F64 = F64;
}
#[cfg(feature = "complex")]
primitive_maps! { MAP_C32 = C32; MAP_C64 = C64; }

impl TypeMap {
    /// A fingerprint of the layout (kinds, offsets, extent), to tell datatypes apart cheaply.
    pub fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for b in self.blocks.iter() {
            (b.offset, b.len, b.kind).hash(&mut h);
        }
        (self.lb, self.extent).hash(&mut h);
        h.finish()
    }
}

/// Common behaviour of datatype handles, committed or not (rsmpi's `UncommittedDatatype`).
pub trait UncommittedDatatype: AsRaw<Raw = crate::handles::MPI_Datatype> {
    /// What [`UncommittedDatatype::dup`] returns.
    type DuplicatedDatatype;
    /// A copy of this datatype (`MPI_Type_dup`).
    fn dup(&self) -> Self::DuplicatedDatatype;
    /// The layout. Not part of rsmpi's API.
    #[doc(hidden)]
    fn type_map(&self) -> &TypeMap;
}

/// A committed datatype, usable in communication.
pub trait Datatype: UncommittedDatatype {}

impl<'a, D: 'a + UncommittedDatatype + ?Sized> UncommittedDatatype for &'a D {
    type DuplicatedDatatype = D::DuplicatedDatatype;
    fn dup(&self) -> Self::DuplicatedDatatype {
        (**self).dup()
    }
    fn type_map(&self) -> &TypeMap {
        (**self).type_map()
    }
}
impl<'a, D: 'a + Datatype + ?Sized> Datatype for &'a D {}

/// A borrowed, committed datatype.
#[derive(Copy, Clone, Debug)]
#[repr(transparent)]
pub struct DatatypeRef<'a> {
    map: &'a TypeMap,
}

/// The datatypes of the primitive types.
pub type SystemDatatype = DatatypeRef<'static>;

impl<'a> DatatypeRef<'a> {
    pub(crate) fn from_map(map: &'a TypeMap) -> Self {
        DatatypeRef { map }
    }
}

/// The seeds' datatype queries (`Extent`, `Size`, `Lb`, `Ub`, and whether the layout is
/// contiguous), for every datatype handle. Not in rsmpi.
pub trait DatatypeInfo: UncommittedDatatype {
    /// Distance in bytes between consecutive elements (`Extent`).
    fn extent(&self) -> Address {
        self.type_map().extent()
    }
    /// Bytes of data in one element (`Size`).
    fn size(&self) -> Count {
        self.type_map().size() as Count
    }
    /// Lower bound (`Lb`).
    fn lower_bound(&self) -> Address {
        self.type_map().lb()
    }
    /// Upper bound (`Ub`).
    fn upper_bound(&self) -> Address {
        self.type_map().ub()
    }
    /// Whether elements occupy `size` bytes with no gap, so buffers are used in place.
    fn is_contiguous(&self) -> bool {
        self.type_map().is_contiguous()
    }
}

impl<D: UncommittedDatatype + ?Sized> DatatypeInfo for D {}

impl UncommittedDatatype for DatatypeRef<'_> {
    type DuplicatedDatatype = UserDatatype;
    fn dup(&self) -> UserDatatype {
        UserDatatype::of(self.map.clone())
    }
    fn type_map(&self) -> &TypeMap {
        self.map
    }
}
impl Datatype for DatatypeRef<'_> {}

// SAFETY: the handle is the address of the layout this reference borrows.
unsafe impl AsRaw for DatatypeRef<'_> {
    type Raw = crate::handles::MPI_Datatype;
    fn as_raw(&self) -> crate::handles::MPI_Datatype {
        crate::handles::MPI_Datatype::of(self.map)
    }
}

impl FromRaw for DatatypeRef<'_> {
    /// A reference to the datatype `datatype` names.
    ///
    /// # Safety
    /// `datatype` must name a live datatype (not `RSMPI_DATATYPE_NULL`) that outlives `'a`.
    unsafe fn from_raw(datatype: crate::handles::MPI_Datatype) -> Self {
        // SAFETY: the caller's contract.
        DatatypeRef { map: unsafe { datatype.map() } }
    }
}

// SAFETY: `#[repr(transparent)]` over a reference, which is the handle's address.
unsafe impl MatchesRaw for DatatypeRef<'_> {}

// SAFETY: as for `DatatypeRef`.
unsafe impl AsRaw for UncommittedDatatypeRef<'_> {
    type Raw = crate::handles::MPI_Datatype;
    fn as_raw(&self) -> crate::handles::MPI_Datatype {
        crate::handles::MPI_Datatype::of(self.map)
    }
}

impl FromRaw for UncommittedDatatypeRef<'_> {
    /// A reference to the datatype `datatype` names.
    ///
    /// # Safety
    /// As for [`DatatypeRef::from_raw`].
    unsafe fn from_raw(datatype: crate::handles::MPI_Datatype) -> Self {
        // SAFETY: the caller's contract.
        UncommittedDatatypeRef { map: unsafe { datatype.map() } }
    }
}

// SAFETY: as for `DatatypeRef`.
unsafe impl MatchesRaw for UncommittedDatatypeRef<'_> {}

/// A borrowed datatype that may not be committed (used to build other datatypes).
#[derive(Copy, Clone, Debug)]
#[repr(transparent)]
pub struct UncommittedDatatypeRef<'a> {
    map: &'a TypeMap,
}

impl UncommittedDatatype for UncommittedDatatypeRef<'_> {
    type DuplicatedDatatype = UncommittedUserDatatype;
    fn dup(&self) -> UncommittedUserDatatype {
        UncommittedUserDatatype::of(self.map.clone())
    }
    fn type_map(&self) -> &TypeMap {
        self.map
    }
}

impl<'a> From<DatatypeRef<'a>> for UncommittedDatatypeRef<'a> {
    fn from(d: DatatypeRef<'a>) -> Self {
        UncommittedDatatypeRef { map: d.map }
    }
}
impl<'a> From<&'a UserDatatype> for DatatypeRef<'a> {
    fn from(d: &'a UserDatatype) -> Self {
        DatatypeRef { map: d.map() }
    }
}
impl<'a> From<&'a UserDatatype> for UncommittedDatatypeRef<'a> {
    fn from(d: &'a UserDatatype) -> Self {
        UncommittedDatatypeRef { map: d.map() }
    }
}
impl<'a> From<&'a UncommittedUserDatatype> for UncommittedDatatypeRef<'a> {
    fn from(d: &'a UncommittedUserDatatype) -> Self {
        UncommittedDatatypeRef { map: d.map() }
    }
}

macro_rules! constructors {
    ($ty:ident) => {
        impl $ty {
            /// `count` copies of `oldtype`, one after the other.
            pub fn contiguous<D: UncommittedDatatype>(count: Count, oldtype: &D) -> Self {
                let old = oldtype.type_map();
                Self::of(TypeMap::compose(&[(0, count.max(0) as usize, old)]))
            }
            /// `count` blocks of `blocklength` elements, block starts `stride` elements apart.
            pub fn vector<D: UncommittedDatatype>(
                count: Count,
                blocklength: Count,
                stride: Count,
                oldtype: &D,
            ) -> Self {
                let old = oldtype.type_map();
                Self::heterogeneous_vector(count, blocklength, stride as Address * old.extent, oldtype)
            }
            /// Like [`Self::vector`] with the stride in bytes.
            pub fn heterogeneous_vector<D: UncommittedDatatype>(
                count: Count,
                blocklength: Count,
                stride: Address,
                oldtype: &D,
            ) -> Self {
                let old = oldtype.type_map();
                let parts: Vec<_> =
                    (0..count.max(0) as isize).map(|i| (i * stride, blocklength.max(0) as usize, old)).collect();
                Self::of(TypeMap::compose(&parts))
            }
            /// Blocks of `blocklengths[i]` elements at `displacements[i]` elements.
            pub fn indexed<D: UncommittedDatatype>(
                blocklengths: &[Count],
                displacements: &[Count],
                oldtype: &D,
            ) -> Self {
                assert_eq!(
                    blocklengths.len(),
                    displacements.len(),
                    "'blocklengths' and 'displacements' must be the same length"
                );
                let ext = oldtype.type_map().extent;
                let d: Vec<Address> = displacements.iter().map(|&x| x as Address * ext).collect();
                Self::heterogeneous_indexed(blocklengths, &d, oldtype)
            }
            /// Like [`Self::indexed`] with displacements in bytes.
            pub fn heterogeneous_indexed<D: UncommittedDatatype>(
                blocklengths: &[Count],
                displacements: &[Address],
                oldtype: &D,
            ) -> Self {
                assert_eq!(
                    blocklengths.len(),
                    displacements.len(),
                    "'blocklengths' and 'displacements' must be the same length"
                );
                let old = oldtype.type_map();
                let parts: Vec<_> =
                    blocklengths.iter().zip(displacements).map(|(&b, &d)| (d, b.max(0) as usize, old)).collect();
                Self::of(TypeMap::compose(&parts))
            }
            /// Blocks of `blocklength` elements at `displacements[i]` elements.
            pub fn indexed_block<D: UncommittedDatatype>(
                blocklength: Count,
                displacements: &[Count],
                oldtype: &D,
            ) -> Self {
                let b = vec![blocklength; displacements.len()];
                Self::indexed(&b, displacements, oldtype)
            }
            /// Like [`Self::indexed_block`] with displacements in bytes.
            pub fn heterogeneous_indexed_block<D: UncommittedDatatype>(
                blocklength: Count,
                displacements: &[Address],
                oldtype: &D,
            ) -> Self {
                let b = vec![blocklength; displacements.len()];
                Self::heterogeneous_indexed(&b, displacements, oldtype)
            }
            /// `blocklengths[i]` elements of `types[i]` at byte `displacements[i]` (a struct).
            /// As in rsmpi, `D`'s representation must be its handle (`MatchesRaw`).
            pub fn structured<D: UncommittedDatatype + MatchesRaw<Raw = crate::handles::MPI_Datatype>>(
                blocklengths: &[Count],
                displacements: &[Address],
                types: &[D],
            ) -> Self {
                assert!(
                    blocklengths.len() == displacements.len() && displacements.len() == types.len(),
                    "'displacements', 'blocklengths', and 'types' must be the same length"
                );
                let parts: Vec<_> = (0..types.len())
                    .map(|i| (displacements[i], blocklengths[i].max(0) as usize, types[i].type_map()))
                    .collect();
                Self::of(TypeMap::compose(&parts).padded())
            }
        }
    };
}

/// A shared layout, by the address of the layout itself (an `Arc<TypeMap>` turned into its
/// raw pointer): so an owned datatype's representation is its handle (rsmpi's `MatchesRaw`).
#[repr(transparent)]
struct SharedMap(NonNull<TypeMap>);

// SAFETY: a `SharedMap` is an `Arc<TypeMap>` (shared, immutable data, `Send + Sync`).
unsafe impl Send for SharedMap {}
// SAFETY: as above.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    fn new(map: TypeMap) -> Self {
        SharedMap(NonNull::new(Arc::into_raw(Arc::new(map)) as *mut TypeMap).expect("an Arc's address"))
    }
    /// The layout.
    fn get(&self) -> &TypeMap {
        // SAFETY: the pointer came from `Arc::into_raw`, and this `SharedMap` holds one of
        // the `Arc`'s counts, so the layout lives at least as long as `self`.
        unsafe { self.0.as_ref() }
    }
}

impl Clone for SharedMap {
    fn clone(&self) -> Self {
        // SAFETY: the pointer came from `Arc::into_raw` and its `Arc` is alive (held by
        // `self`); the new count is released by the clone's `Drop`.
        unsafe { Arc::increment_strong_count(self.0.as_ptr()) };
        SharedMap(self.0)
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `Arc::into_raw`, and this `SharedMap` gives back the
        // count it held, once.
        drop(unsafe { Arc::from_raw(self.0.as_ptr()) });
    }
}

impl std::fmt::Debug for SharedMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// An owned, committed, user-defined datatype. Its representation is its handle
/// (`MatchesRaw`): a slice of them is an array of `MPI_Datatype`.
#[derive(Debug, Clone)]
#[repr(transparent)]
pub struct UserDatatype {
    map: SharedMap,
}

impl UserDatatype {
    fn of(map: TypeMap) -> Self {
        UserDatatype { map: SharedMap::new(map) }
    }
    fn map(&self) -> &TypeMap {
        self.map.get()
    }
    /// The same layout with lower bound 0 and the given extent (`MPI_Type_create_resized`),
    /// e.g. to match a Rust type's `size_of`.
    pub fn resized(self, extent: usize) -> Self {
        let mut m = self.map().clone();
        m.lb = 0;
        m.extent = extent as isize;
        UserDatatype::of(m)
    }
    /// The same layout with lower bound `lb` and extent `extent`, either of any sign
    /// (`MPI_Type_create_resized` in full).
    pub fn with_bounds(self, lb: Address, extent: Address) -> Self {
        let mut m = self.map().clone();
        m.lb = lb;
        m.extent = extent;
        UserDatatype::of(m)
    }
    /// One value of primitive kind `kind` (a complex number without the `complex` feature,
    /// `long double` as 16 opaque bytes: for a C or Fortran library's predefined types).
    pub fn primitive(kind: Primitive) -> Self {
        UserDatatype::of(TypeMap::primitive(kind))
    }
    /// A borrowed handle.
    pub fn as_ref(&self) -> DatatypeRef<'_> {
        DatatypeRef { map: self.map() }
    }
}
constructors!(UserDatatype);

impl UncommittedDatatype for UserDatatype {
    type DuplicatedDatatype = UserDatatype;
    fn dup(&self) -> UserDatatype {
        self.clone()
    }
    fn type_map(&self) -> &TypeMap {
        self.map()
    }
}
impl Datatype for UserDatatype {}

// SAFETY: the handle is the address of this datatype's layout, alive as long as it is.
unsafe impl AsRaw for UserDatatype {
    type Raw = crate::handles::MPI_Datatype;
    fn as_raw(&self) -> crate::handles::MPI_Datatype {
        crate::handles::MPI_Datatype::of(self.map())
    }
}

// SAFETY: `#[repr(transparent)]` over `SharedMap`, itself over a non-null pointer to the
// layout, which is the handle's value (`MPI_Datatype` is a transparent `*const c_void`).
unsafe impl MatchesRaw for UserDatatype {}

impl FromRaw for UserDatatype {
    /// A datatype with the layout `handle` names (a copy: p2pmpi's layouts are immutable,
    /// so it behaves as the same datatype; the named one is not freed with it).
    ///
    /// # Safety
    /// `handle` must name a live datatype (not `RSMPI_DATATYPE_NULL`).
    unsafe fn from_raw(handle: crate::handles::MPI_Datatype) -> Self {
        // SAFETY: the caller's contract; the layout is only read during this call.
        UserDatatype::of(unsafe { handle.map() }.clone())
    }
}

/// An owned user-defined datatype that is not committed yet. Its representation is its
/// handle (`MatchesRaw`), as for [`UserDatatype`].
#[derive(Debug, Clone)]
#[repr(transparent)]
pub struct UncommittedUserDatatype {
    map: SharedMap,
}

impl UncommittedUserDatatype {
    fn of(map: TypeMap) -> Self {
        UncommittedUserDatatype { map: SharedMap::new(map) }
    }
    fn map(&self) -> &TypeMap {
        self.map.get()
    }
    /// Commits the datatype so it can be used in communication.
    pub fn commit(self) -> UserDatatype {
        UserDatatype { map: self.map }
    }
    /// A borrowed handle.
    pub fn as_ref(&self) -> UncommittedDatatypeRef<'_> {
        UncommittedDatatypeRef { map: self.map() }
    }
}
constructors!(UncommittedUserDatatype);

// SAFETY: as for `UserDatatype`.
unsafe impl AsRaw for UncommittedUserDatatype {
    type Raw = crate::handles::MPI_Datatype;
    fn as_raw(&self) -> crate::handles::MPI_Datatype {
        crate::handles::MPI_Datatype::of(self.map())
    }
}

// SAFETY: as for `UserDatatype`.
unsafe impl MatchesRaw for UncommittedUserDatatype {}

impl FromRaw for UncommittedUserDatatype {
    /// A datatype with the layout `handle` names (a copy, as for `UserDatatype`).
    ///
    /// # Safety
    /// As for [`UserDatatype::from_raw`].
    unsafe fn from_raw(handle: crate::handles::MPI_Datatype) -> Self {
        // SAFETY: the caller's contract; the layout is only read during this call.
        UncommittedUserDatatype::of(unsafe { handle.map() }.clone())
    }
}

impl UncommittedDatatype for UncommittedUserDatatype {
    type DuplicatedDatatype = UncommittedUserDatatype;
    fn dup(&self) -> UncommittedUserDatatype {
        self.clone()
    }
    fn type_map(&self) -> &TypeMap {
        self.map()
    }
}

/// A type with an equivalent datatype: values of it can be sent and received.
///
/// # Safety
/// The datatype must describe `Self` exactly, since the library reads and writes values of
/// `Self` through it as raw bytes:
/// * its blocks cover bytes of `Self` that hold data (never padding), each with the kind of
///   the primitive stored there;
/// * its lower bound is 0 and its extent `size_of::<Self>()`, so that `n` elements of the
///   datatype are exactly a `[Self; n]`;
/// * every bit pattern of a block is a valid value for the bytes it covers, except in
///   [`Primitive::Bool`] blocks, which the library only ever fills with 0 or 1 (received
///   `bool` data is staged and unpacked, turning any non-zero byte into `true`); so a value
///   built from received bytes is a valid `Self`;
/// * `Self` is plain data: no pointers, no interior mutability (views of it are shared with
///   reduction operations, see [`DynBuffer`]).
///
/// `#[derive(Equivalence)]` (feature `derive`) builds such a datatype for a struct whose
/// fields are `Equivalence` types.
pub unsafe trait Equivalence {
    /// The datatype handle type.
    type Out: Datatype;
    /// The datatype of `Self`.
    fn equivalent_datatype() -> Self::Out;
}

macro_rules! equivalence {
    ($($t:ty => $map:ident),* $(,)?) => {$(
        // SAFETY: `$map` is the primitive map of `$t`: one block of kind `$t` covering all
        // `size_of::<$t>()` bytes at offset 0, lb 0, extent `size_of::<$t>()` (the kinds'
        // sizes are Rust's, and `isize`/`usize` map to the integer of the pointer width).
        // Every bit pattern is a valid integer, float or complex number; `bool`'s block is
        // of kind `Bool`, which the library fills with 0 or 1 only (`TypeMap::unpack`,
        // `TypeMap::receives_in_place`). All of them are plain data.
        unsafe impl Equivalence for $t {
            type Out = SystemDatatype;
            #[inline]
            fn equivalent_datatype() -> SystemDatatype {
                DatatypeRef { map: &$map }
            }
        }
    )*};
}
equivalence! {
    bool => MAP_BOOL, i8 => MAP_I8, u8 => MAP_U8,
    i16 => MAP_I16, u16 => MAP_U16,
    i32 => MAP_I32, u32 => MAP_U32, f32 => MAP_F32,
    i64 => MAP_I64, u64 => MAP_U64, f64 => MAP_F64,
    i128 => MAP_I128, u128 => MAP_U128,
}
#[cfg(target_pointer_width = "64")]
equivalence! { isize => MAP_I64, usize => MAP_U64 }
#[cfg(target_pointer_width = "32")]
equivalence! { isize => MAP_I32, usize => MAP_U32 }
#[cfg(feature = "complex")]
equivalence! { num_complex::Complex32 => MAP_C32, num_complex::Complex64 => MAP_C64 }

/// The datatype of a tuple type, built once and kept for the life of the process.
fn tuple_datatype<T: 'static>(build: impl FnOnce() -> UserDatatype) -> DatatypeRef<'static> {
    use std::any::TypeId;
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    // Process-wide because the datatypes are handed out as `&'static` (an `Equivalence`'s
    // datatype), the same for the whole run.
    static CACHE: OnceLock<Mutex<HashMap<TypeId, &'static UserDatatype>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(d) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&TypeId::of::<T>()) {
        return d.as_ref();
    }
    let d: &'static UserDatatype = Box::leak(Box::new(build()));
    let mut c = cache.lock().unwrap_or_else(|p| p.into_inner());
    c.entry(TypeId::of::<T>()).or_insert(d).as_ref()
}

/// Pairs — the seeds' pair types (`INT2`, `DOUBLE2`, … used with MAXLOC/MINLOC, e.g.
/// `(f64, i32)` as (value, index)). Not in rsmpi.
// SAFETY: the datatype places A's and B's datatypes (which describe them exactly) at the
// tuple's own field offsets (`offset_of!`), so it covers the fields' data and no padding;
// `resized` sets lb 0 and extent `size_of::<(A, B)>()`. Bit patterns and plain data: as A
// and B.
unsafe impl<A: Equivalence + 'static, B: Equivalence + 'static> Equivalence for (A, B) {
    type Out = DatatypeRef<'static>;
    fn equivalent_datatype() -> Self::Out {
        tuple_datatype::<(A, B)>(|| {
            let (a, b) = (A::equivalent_datatype(), B::equivalent_datatype());
            UserDatatype::structured(
                &[1, 1],
                &[std::mem::offset_of!((A, B), 0) as Address, std::mem::offset_of!((A, B), 1) as Address],
                &[UncommittedDatatypeRef { map: a.type_map() }, UncommittedDatatypeRef { map: b.type_map() }],
            )
            .resized(std::mem::size_of::<(A, B)>())
        })
    }
}

/// Triples. Not in rsmpi.
// SAFETY: as for pairs: the fields' exact datatypes at `offset_of!` offsets, resized to lb 0
// and extent `size_of::<(A, B, C)>()`.
unsafe impl<A: Equivalence + 'static, B: Equivalence + 'static, C: Equivalence + 'static> Equivalence for (A, B, C) {
    type Out = DatatypeRef<'static>;
    fn equivalent_datatype() -> Self::Out {
        tuple_datatype::<(A, B, C)>(|| {
            let (a, b, c) = (A::equivalent_datatype(), B::equivalent_datatype(), C::equivalent_datatype());
            UserDatatype::structured(
                &[1, 1, 1],
                &[
                    std::mem::offset_of!((A, B, C), 0) as Address,
                    std::mem::offset_of!((A, B, C), 1) as Address,
                    std::mem::offset_of!((A, B, C), 2) as Address,
                ],
                &[
                    UncommittedDatatypeRef { map: a.type_map() },
                    UncommittedDatatypeRef { map: b.type_map() },
                    UncommittedDatatypeRef { map: c.type_map() },
                ],
            )
            .resized(std::mem::size_of::<(A, B, C)>())
        })
    }
}

/// Something whose datatype is known.
///
/// # Safety
/// The datatype must describe the memory the value points to (as [`Equivalence`] describes
/// a type: data blocks only, and for a receive buffer every bit pattern valid there).
pub unsafe trait AsDatatype {
    type Out: Datatype;
    fn as_datatype(&self) -> Self::Out;
}

/// Something with a number of elements.
///
/// # Safety
/// `count` elements of the datatype must lie in the memory the value points to.
pub unsafe trait Collection {
    fn count(&self) -> Count;
}

/// Something with an address.
///
/// # Safety
/// The pointer must be valid for reads of the described data (the `count` elements of the
/// datatype, or for a partitioned buffer the elements of its parts), which must be
/// initialised, for as long as the value is borrowed.
pub unsafe trait Pointer {
    fn pointer(&self) -> *const c_void;
}

/// Something with a mutable address.
///
/// # Safety
/// The pointer must be valid for reads and writes of the described data (the `count`
/// elements of the datatype, or the elements of a partitioned buffer's parts), which must be
/// initialised, for as long as the value is mutably borrowed.
pub unsafe trait PointerMut {
    fn pointer_mut(&mut self) -> *mut c_void;
}

/// A buffer that can be sent.
///
/// # Safety
/// Pointer, count and datatype must describe valid memory.
pub unsafe trait Buffer: Pointer + Collection + AsDatatype {}

/// A buffer that can be received into.
///
/// # Safety
/// Pointer, count and datatype must describe valid, writable memory.
pub unsafe trait BufferMut: PointerMut + Collection + AsDatatype {}

// A value `T` is one element of `T`, an array `[T; N]` is N elements of `T` back to back.
macro_rules! buffers {
    ($([$($g:tt)*] $t:ty, $count:expr;)*) => {$(
        // SAFETY: the elements are `T`s, which `T::equivalent_datatype()` describes exactly
        // (`Equivalence`'s contract).
        unsafe impl<$($g)*> AsDatatype for $t {
            type Out = <T as Equivalence>::Out;
            fn as_datatype(&self) -> Self::Out { T::equivalent_datatype() }
        }
        // SAFETY: the value holds exactly this many `T`s (1, or N), and N elements of `T`'s
        // datatype span `N * size_of::<T>()` bytes (extent `size_of::<T>()`).
        unsafe impl<$($g)*> Collection for $t {
            #[allow(clippy::redundant_closure_call, reason = "the count is given to the macro as a closure")]
            fn count(&self) -> Count { ($count)(self) }
        }
        // SAFETY: the address of the value is that of its first `T`; a `&self` borrow makes
        // the initialised elements readable for as long as it lasts.
        unsafe impl<$($g)*> Pointer for $t {
            fn pointer(&self) -> *const c_void { self as *const Self as *const T as *const c_void }
        }
        // SAFETY: as for `Pointer`, and `&mut self` makes them writable too.
        unsafe impl<$($g)*> PointerMut for $t {
            fn pointer_mut(&mut self) -> *mut c_void { self as *mut Self as *mut T as *mut c_void }
        }
        // SAFETY: the impls above describe the same elements.
        unsafe impl<$($g)*> Buffer for $t {}
        // SAFETY: the impls above describe the same elements.
        unsafe impl<$($g)*> BufferMut for $t {}
    )*};
}
buffers! {
    [T: Equivalence] T, |_: &T| 1;
    [T: Equivalence, const N: usize] [T; N], |_: &[T; N]| N as Count;
}

// SAFETY: the elements are `T`s, which `T::equivalent_datatype()` describes exactly.
unsafe impl<T: Equivalence> AsDatatype for [T] {
    type Out = T::Out;
    fn as_datatype(&self) -> T::Out {
        T::equivalent_datatype()
    }
}
// SAFETY: the slice holds `len` elements of `T`, i.e. `len` elements of its datatype (extent
// `size_of::<T>()`); a length beyond `Count` panics rather than being truncated.
unsafe impl<T: Equivalence> Collection for [T] {
    fn count(&self) -> Count {
        self.len().try_into().expect("buffer length exceeds the range of a Count")
    }
}
// SAFETY: `as_ptr` is the first of the `len` initialised elements, readable while `self` is
// borrowed.
unsafe impl<T: Equivalence> Pointer for [T] {
    fn pointer(&self) -> *const c_void {
        self.as_ptr() as _
    }
}
// SAFETY: `as_mut_ptr` is the first of the `len` elements, readable and writable while
// `self` is mutably borrowed.
unsafe impl<T: Equivalence> PointerMut for [T] {
    fn pointer_mut(&mut self) -> *mut c_void {
        self.as_mut_ptr() as _
    }
}
// SAFETY: the impls above describe the same `len` elements.
unsafe impl<T: Equivalence> Buffer for [T] {}
// SAFETY: the impls above describe the same `len` elements.
unsafe impl<T: Equivalence> BufferMut for [T] {}

// SAFETY: the elements are `T`s, which `T::equivalent_datatype()` describes exactly.
unsafe impl<T: Equivalence> AsDatatype for Vec<T> {
    type Out = T::Out;
    fn as_datatype(&self) -> T::Out {
        T::equivalent_datatype()
    }
}
// SAFETY: the count of the vector's slice of `len` elements (see `[T]`).
unsafe impl<T: Equivalence> Collection for Vec<T> {
    fn count(&self) -> Count {
        self[..].count()
    }
}
// SAFETY: `as_ptr` is the first of the `len` initialised elements, readable while `self` is
// borrowed (a borrowed vector cannot reallocate).
unsafe impl<T: Equivalence> Pointer for Vec<T> {
    fn pointer(&self) -> *const c_void {
        self.as_ptr() as _
    }
}
// SAFETY: `as_mut_ptr` is the first of the `len` elements, readable and writable while
// `self` is mutably borrowed (through this borrow only: the API never resizes it).
unsafe impl<T: Equivalence> PointerMut for Vec<T> {
    fn pointer_mut(&mut self) -> *mut c_void {
        self.as_mut_ptr() as _
    }
}
// SAFETY: the impls above describe the same `len` elements.
unsafe impl<T: Equivalence> Buffer for Vec<T> {}
// SAFETY: the impls above describe the same `len` elements.
unsafe impl<T: Equivalence> BufferMut for Vec<T> {}

/// A buffer seen through an explicit datatype and count.
pub struct View<'d, 'b, D, B: ?Sized>
where
    D: 'd + Datatype,
    B: 'b + Pointer,
{
    datatype: &'d D,
    count: Count,
    buffer: &'b B,
}

impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + Pointer> View<'d, 'b, D, B> {
    /// # Safety
    /// `count` elements of `datatype`, starting at `buffer`'s address, must lie in
    /// `buffer`'s initialised memory.
    pub unsafe fn with_count_and_datatype(buffer: &'b B, count: Count, datatype: &'d D) -> Self {
        View { datatype, count, buffer }
    }
}
// SAFETY: for the four impls of `View`: `with_count_and_datatype`'s caller guaranteed that
// `count` elements of `datatype` lie in `buffer`'s initialised memory, which `B: Pointer`
// keeps readable for the borrow `'b` the view holds.
unsafe impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + Pointer> AsDatatype for View<'d, 'b, D, B> {
    type Out = &'d D;
    fn as_datatype(&self) -> &'d D {
        self.datatype
    }
}
// SAFETY: see `AsDatatype for View`.
unsafe impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + Pointer> Collection for View<'d, 'b, D, B> {
    fn count(&self) -> Count {
        self.count
    }
}
// SAFETY: see `AsDatatype for View`.
unsafe impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + Pointer> Pointer for View<'d, 'b, D, B> {
    fn pointer(&self) -> *const c_void {
        self.buffer.pointer()
    }
}
// SAFETY: see `AsDatatype for View`.
unsafe impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + Pointer> Buffer for View<'d, 'b, D, B> {}

/// A mutable buffer seen through an explicit datatype and count.
pub struct MutView<'d, 'b, D, B: ?Sized>
where
    D: 'd + Datatype,
    B: 'b + PointerMut,
{
    datatype: &'d D,
    count: Count,
    buffer: &'b mut B,
}

impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + PointerMut> MutView<'d, 'b, D, B> {
    /// # Safety
    /// `count` elements of `datatype`, starting at `buffer`'s address, must lie in
    /// `buffer`'s initialised memory, and every bit pattern of each block of `datatype` must
    /// be valid for the bytes of `buffer` it covers (received data is written there as is,
    /// but for `bool` blocks).
    pub unsafe fn with_count_and_datatype(buffer: &'b mut B, count: Count, datatype: &'d D) -> Self {
        MutView { datatype, count, buffer }
    }
}
// SAFETY: for the four impls of `MutView`: `with_count_and_datatype`'s caller guaranteed that
// `count` elements of `datatype` lie in `buffer`'s initialised memory and that any bit
// pattern of the datatype's blocks is valid there; `B: PointerMut` keeps that memory readable
// and writable for the mutable borrow `'b` the view holds.
unsafe impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + PointerMut> AsDatatype for MutView<'d, 'b, D, B> {
    type Out = &'d D;
    fn as_datatype(&self) -> &'d D {
        self.datatype
    }
}
// SAFETY: see `AsDatatype for MutView`.
unsafe impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + PointerMut> Collection for MutView<'d, 'b, D, B> {
    fn count(&self) -> Count {
        self.count
    }
}
// SAFETY: see `AsDatatype for MutView`.
unsafe impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + PointerMut> PointerMut for MutView<'d, 'b, D, B> {
    fn pointer_mut(&mut self) -> *mut c_void {
        self.buffer.pointer_mut()
    }
}
// SAFETY: see `AsDatatype for MutView`.
unsafe impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + PointerMut> BufferMut for MutView<'d, 'b, D, B> {}

/// A buffer split into parts of given counts at given displacements (in elements), for the
/// `*_varcount_*` collectives.
pub trait Partitioned {
    /// Elements of each part.
    fn counts(&self) -> &[Count];
    /// Displacement of each part, in elements.
    fn displs(&self) -> &[Count];
    /// How many elements the memory behind the buffer holds, if known: the collectives then
    /// check every part against it before touching the memory. Not part of rsmpi's API.
    #[doc(hidden)]
    fn element_limit(&self) -> Option<Count> {
        None
    }
}

/// A partitioned buffer that can be sent.
pub trait PartitionedBuffer: Partitioned + Pointer + AsDatatype {}
/// A partitioned buffer that can be received into.
pub trait PartitionedBufferMut: Partitioned + PointerMut + AsDatatype {}

/// A read-only partitioned buffer.
pub struct Partition<'b, B: 'b + ?Sized, C, D> {
    buf: &'b B,
    counts: C,
    displs: D,
    /// `buf.count()`, which every part was checked against.
    limit: Count,
}

impl<'b, B, C, D> Partition<'b, B, C, D>
where
    B: 'b + Buffer + ?Sized,
    C: std::borrow::Borrow<[Count]>,
    D: std::borrow::Borrow<[Count]>,
{
    /// Parts of `counts[i]` elements at `displs[i]`. Panics if a part exceeds the buffer.
    pub fn new(buf: &'b B, counts: C, displs: D) -> Self {
        let n = buf.count();
        assert_eq!(counts.borrow().len(), displs.borrow().len(), "counts and displs must have the same length");
        for (&c, &d) in counts.borrow().iter().zip(displs.borrow()) {
            assert!(
                c >= 0 && d >= 0 && c as i64 + d as i64 <= n as i64,
                "partition [{d}, {d}+{c}) exceeds the buffer of {n} elements"
            );
        }
        Partition { buf, counts, displs, limit: n }
    }
}

// SAFETY: the parts are elements of `buf`, which its own datatype describes.
unsafe impl<'b, B: 'b + Buffer + ?Sized, C, D> AsDatatype for Partition<'b, B, C, D> {
    type Out = <B as AsDatatype>::Out;
    fn as_datatype(&self) -> Self::Out {
        self.buf.as_datatype()
    }
}
// SAFETY: `buf.pointer()` is readable for `buf.count()` elements (`B: Buffer`) while `'b`
// lasts. `new` checked the parts against that count, and `element_limit` gives it to the
// collectives, which check the parts again when they use them (`counts()` and `displs()`
// go through the `Borrow` impls of `C` and `D`, safe code that could answer differently).
unsafe impl<'b, B: 'b + Buffer + ?Sized, C, D> Pointer for Partition<'b, B, C, D> {
    fn pointer(&self) -> *const c_void {
        self.buf.pointer()
    }
}
impl<'b, B: 'b + Buffer + ?Sized, C: std::borrow::Borrow<[Count]>, D: std::borrow::Borrow<[Count]>> Partitioned
    for Partition<'b, B, C, D>
{
    fn counts(&self) -> &[Count] {
        self.counts.borrow()
    }
    fn displs(&self) -> &[Count] {
        self.displs.borrow()
    }
    fn element_limit(&self) -> Option<Count> {
        Some(self.limit)
    }
}
impl<'b, B: 'b + Buffer + ?Sized, C: std::borrow::Borrow<[Count]>, D: std::borrow::Borrow<[Count]>> PartitionedBuffer
    for Partition<'b, B, C, D>
{
}

/// A mutable partitioned buffer.
pub struct PartitionMut<'b, B: 'b + ?Sized, C, D> {
    buf: &'b mut B,
    counts: C,
    displs: D,
    /// `buf.count()`, which every part was checked against.
    limit: Count,
}

impl<'b, B, C, D> PartitionMut<'b, B, C, D>
where
    B: 'b + BufferMut + ?Sized,
    C: std::borrow::Borrow<[Count]>,
    D: std::borrow::Borrow<[Count]>,
{
    /// Parts of `counts[i]` elements at `displs[i]`. Panics if a part exceeds the buffer.
    pub fn new(buf: &'b mut B, counts: C, displs: D) -> Self {
        let n = buf.count();
        assert_eq!(counts.borrow().len(), displs.borrow().len(), "counts and displs must have the same length");
        for (&c, &d) in counts.borrow().iter().zip(displs.borrow()) {
            assert!(
                c >= 0 && d >= 0 && c as i64 + d as i64 <= n as i64,
                "partition [{d}, {d}+{c}) exceeds the buffer of {n} elements"
            );
        }
        PartitionMut { buf, counts, displs, limit: n }
    }
}

// SAFETY: the parts are elements of `buf`, which its own datatype describes.
unsafe impl<'b, B: 'b + BufferMut + ?Sized, C, D> AsDatatype for PartitionMut<'b, B, C, D> {
    type Out = <B as AsDatatype>::Out;
    fn as_datatype(&self) -> Self::Out {
        self.buf.as_datatype()
    }
}
// SAFETY: `buf.pointer_mut()` is readable and writable for `buf.count()` elements
// (`B: BufferMut`) while the mutable borrow `'b` lasts; the parts are checked against that
// count as for `Partition`.
unsafe impl<'b, B: 'b + BufferMut + ?Sized, C, D> PointerMut for PartitionMut<'b, B, C, D> {
    fn pointer_mut(&mut self) -> *mut c_void {
        self.buf.pointer_mut()
    }
}
impl<'b, B: 'b + BufferMut + ?Sized, C: std::borrow::Borrow<[Count]>, D: std::borrow::Borrow<[Count]>> Partitioned
    for PartitionMut<'b, B, C, D>
{
    fn counts(&self) -> &[Count] {
        self.counts.borrow()
    }
    fn displs(&self) -> &[Count] {
        self.displs.borrow()
    }
    fn element_limit(&self) -> Option<Count> {
        Some(self.limit)
    }
}
impl<'b, B: 'b + BufferMut + ?Sized, C: std::borrow::Borrow<[Count]>, D: std::borrow::Borrow<[Count]>>
    PartitionedBufferMut for PartitionMut<'b, B, C, D>
{
}

/// What a [`DynBuffer`] knows of its elements' type: the fingerprint of its layout, and the
/// lower bound and extent that place the elements in memory.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct ElementType {
    fingerprint: u64,
    lb: isize,
    extent: isize,
}

impl ElementType {
    fn of_map(map: &TypeMap) -> ElementType {
        ElementType { fingerprint: map.fingerprint(), lb: map.lb(), extent: map.extent() }
    }
    fn of<T: Equivalence>() -> ElementType {
        ElementType::of_map(T::equivalent_datatype().type_map())
    }
    /// Whether `len` elements at `ptr` of this type may be viewed as a `[T]`: same layout
    /// fingerprint, and (so that even a fingerprint collision could not reach outside the
    /// memory or misalign) the elements are `size_of::<T>()` apart from offset 0, and `ptr`
    /// is non-null and aligned for `T`.
    fn fits<T: Equivalence>(&self, ptr: *const c_void) -> bool {
        *self == ElementType::of::<T>()
            && self.lb == 0
            && self.extent == std::mem::size_of::<T>() as isize
            && !ptr.is_null()
            && (ptr as usize) % std::mem::align_of::<T>() == 0
    }
}

/// A read-only buffer whose element type is known only at run time (what user reduction
/// operations receive).
#[derive(Copy, Clone, Debug)]
pub struct DynBuffer<'a> {
    ptr: *const c_void,
    len: usize,
    /// The elements' layout, for use as a [`Buffer`] (and the element type's, computed only
    /// when asked for: hashing it at every wrap cost a C send or receive ~400 instructions).
    map: &'a TypeMap,
    phantom: std::marker::PhantomData<&'a [u8]>,
}

/// A `'static` copy of `map`, one per distinct layout (kept for the life of the process), so
/// that a [`DynBuffer`] made from a type whose datatype is owned can name its layout.
fn interned(map: &TypeMap) -> &'static TypeMap {
    // Process-wide because the layouts are handed out as `&'static`, for the whole run.
    static LAYOUTS: std::sync::Mutex<Vec<&'static TypeMap>> = std::sync::Mutex::new(Vec::new());
    let mut all = LAYOUTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(m) = all.iter().find(|m| **m == map) {
        return m;
    }
    let m: &'static TypeMap = Box::leak(Box::new(map.clone()));
    all.push(m);
    m
}

// SAFETY: a `DynBuffer` is a shared view, for `'a`, of elements of an `Equivalence` type (or,
// through `from_raw`, of memory under the same terms): plain data, without pointers or
// interior mutability, so that like `&'a [T]` for a `T: Sync` it may be sent to and shared
// with other threads.
unsafe impl Send for DynBuffer<'_> {}
// SAFETY: see `Send for DynBuffer`: through `&DynBuffer` the elements can only be read.
unsafe impl Sync for DynBuffer<'_> {}

impl<'a> DynBuffer<'a> {
    /// Wraps a typed slice.
    pub fn new<T: Equivalence>(buf: &'a [T]) -> Self {
        let dt = T::equivalent_datatype();
        DynBuffer { ptr: buf.as_ptr() as _, len: buf.len(), map: interned(dt.type_map()), phantom: Default::default() }
    }
    /// Whether the elements are of type `T`.
    pub fn is<T: Equivalence>(&self) -> bool {
        ElementType::of_map(self.map).fingerprint == ElementType::of::<T>().fingerprint
    }
    /// The elements as a `&[T]`, if they are of type `T`.
    pub fn downcast<T: Equivalence>(self) -> Option<&'a [T]> {
        ElementType::of_map(self.map).fits::<T>(self.ptr).then(|| {
            // SAFETY: the buffer holds `len` initialised elements of its datatype for `'a`
            // (made from a `&'a [T']` in `new`, or promised by `from_raw`'s caller). `fits`
            // checked that this datatype is `T`'s (same fingerprint, lb 0, extent
            // `size_of::<T>()`): the `len * size_of::<T>()` bytes at the non-null, aligned
            // `ptr` are those elements, and `T`'s datatype covers all of `T`'s data, every bit
            // pattern of which is a valid `T` (`Equivalence`'s contract). They are only read
            // for `'a`, as the shared borrow the buffer stands for allows. (Two different
            // layouts with one fingerprint would take a collision of its 64-bit hash; even
            // then the extent and alignment checks keep the view inside the memory.)
            unsafe { std::slice::from_raw_parts(self.ptr as *const T, self.len) }
        })
    }
    /// Wraps raw memory of `len` elements of `datatype`.
    ///
    /// # Safety
    /// The memory must hold `len` valid elements of `datatype` for `'a`, readable and not
    /// written for `'a`, each a valid value of any `Equivalence` type of that datatype.
    pub unsafe fn from_raw<T>(ptr: *const T, len: Count, datatype: DatatypeRef<'a>) -> Self {
        DynBuffer { ptr: ptr as _, len: len.max(0) as usize, map: datatype.map, phantom: Default::default() }
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether there is no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The address of the first element.
    pub fn as_ptr(&self) -> *const c_void {
        self.ptr
    }
}

/// A mutable buffer whose element type is known only at run time.
#[derive(Debug)]
pub struct DynBufferMut<'a> {
    ptr: *mut c_void,
    len: usize,
    /// The elements' layout, for use as a [`BufferMut`] (the element type's, as in
    /// [`DynBuffer`]).
    map: &'a TypeMap,
    phantom: std::marker::PhantomData<&'a mut [u8]>,
}

// SAFETY: a `DynBufferMut` is an exclusive view, for `'a`, of plain-data elements (see
// `DynBuffer`), so that like `&'a mut [T]` it may move to another thread.
unsafe impl Send for DynBufferMut<'_> {}
// SAFETY: through `&DynBufferMut` the elements can only be read (`reborrow`, `as_ptr`): like
// `&&mut [T]` for a `T: Sync`.
unsafe impl Sync for DynBufferMut<'_> {}

impl<'a> DynBufferMut<'a> {
    /// Wraps a typed mutable slice.
    pub fn new<T: Equivalence>(buf: &'a mut [T]) -> Self {
        let dt = T::equivalent_datatype();
        DynBufferMut {
            ptr: buf.as_mut_ptr() as _,
            len: buf.len(),
            map: interned(dt.type_map()),
            phantom: Default::default(),
        }
    }
    /// Whether the elements are of type `T`.
    pub fn is<T: Equivalence>(&self) -> bool {
        ElementType::of_map(self.map).fingerprint == ElementType::of::<T>().fingerprint
    }
    /// The elements as a `&mut [T]`, if they are of type `T`.
    pub fn downcast<T: Equivalence>(self) -> Option<&'a mut [T]> {
        ElementType::of_map(self.map).fits::<T>(self.ptr).then(|| {
            // SAFETY: as in `DynBuffer::downcast`, the bytes are `len` valid `T`s; the buffer
            // stands for an exclusive borrow for `'a` (a `&'a mut [T']` in `new`, promised by
            // `from_raw`'s caller), and `self` is consumed, so this is the only view. Any `T`
            // the caller stores is a valid element of the datatype.
            unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut T, self.len) }
        })
    }
    /// Wraps raw memory of `len` elements of `datatype`.
    ///
    /// # Safety
    /// The memory must hold `len` valid elements of `datatype` for `'a`, readable, writable
    /// and accessed by nothing else for `'a`, each a valid value of any `Equivalence` type of
    /// that datatype.
    pub unsafe fn from_raw<T>(ptr: *mut T, len: Count, datatype: DatatypeRef<'a>) -> Self {
        DynBufferMut { ptr: ptr as _, len: len.max(0) as usize, map: datatype.map, phantom: Default::default() }
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether there is no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The address of the first element.
    pub fn as_ptr(&self) -> *const c_void {
        self.ptr
    }
    /// The mutable address of the first element.
    pub fn as_mut_ptr(&mut self) -> *mut c_void {
        self.ptr
    }
    /// A read-only view for the duration of the borrow.
    pub fn reborrow(&self) -> DynBuffer<'_> {
        DynBuffer { ptr: self.ptr, len: self.len, map: self.map, phantom: Default::default() }
    }
    /// A mutable view for the duration of the borrow.
    pub fn reborrow_mut(&mut self) -> DynBufferMut<'_> {
        DynBufferMut { ptr: self.ptr, len: self.len, map: self.map, phantom: Default::default() }
    }
    /// Gives up mutability.
    pub fn downgrade(self) -> DynBuffer<'a> {
        DynBuffer { ptr: self.ptr, len: self.len, map: self.map, phantom: Default::default() }
    }
}

// SAFETY: the datatype is the elements' own layout (from `T` in `new`, or the one
// `from_raw`'s caller vouched for).
unsafe impl<'a> AsDatatype for DynBufferMut<'a> {
    type Out = DatatypeRef<'a>;
    fn as_datatype(&self) -> DatatypeRef<'a> {
        DatatypeRef::from_map(self.map)
    }
}
// SAFETY: `len` elements of the datatype are at `ptr` (see `AsDatatype`).
unsafe impl Collection for DynBufferMut<'_> {
    fn count(&self) -> Count {
        Count::try_from(self.len).expect("a DynBufferMut of more elements than a Count holds")
    }
}
// SAFETY: `ptr` is readable for the `len` elements for `'a` (`new`'s borrow, `from_raw`'s
// contract), and the pointer is only used while `self` is borrowed.
unsafe impl Pointer for DynBufferMut<'_> {
    fn pointer(&self) -> *const c_void {
        self.ptr
    }
}
// SAFETY: `ptr` is writable and used by nothing else for `'a` (the exclusive borrow the buffer
// stands for); any element stored is a valid value (`from_raw`'s contract, `Equivalence`'s).
unsafe impl PointerMut for DynBufferMut<'_> {
    fn pointer_mut(&mut self) -> *mut c_void {
        self.ptr
    }
}
// SAFETY: see the impls above.
unsafe impl Buffer for DynBufferMut<'_> {}
// SAFETY: see the impls above.
unsafe impl BufferMut for DynBufferMut<'_> {}

// SAFETY: the datatype is the elements' own layout (from `T` in `new`, or the one
// `from_raw`'s caller vouched for).
unsafe impl<'a> AsDatatype for DynBuffer<'a> {
    type Out = DatatypeRef<'a>;
    fn as_datatype(&self) -> DatatypeRef<'a> {
        DatatypeRef::from_map(self.map)
    }
}
// SAFETY: `len` elements of the datatype are at `ptr` (see `AsDatatype`).
unsafe impl Collection for DynBuffer<'_> {
    fn count(&self) -> Count {
        Count::try_from(self.len).expect("a DynBuffer of more elements than a Count holds")
    }
}
// SAFETY: `ptr` is readable for the `len` elements for `'a` (`new`'s borrow, `from_raw`'s
// contract).
unsafe impl Pointer for DynBuffer<'_> {
    fn pointer(&self) -> *const c_void {
        self.ptr
    }
}
// SAFETY: see the impls above.
unsafe impl Buffer for DynBuffer<'_> {}

/// The address of a value (`MPI_Get_address`).
pub fn address_of<T>(x: &T) -> Address {
    x as *const T as Address
}

/// Support code for `#[derive(Equivalence)]`.
#[doc(hidden)]
pub mod internal {
    /// Panics like rsmpi when a derived datatype is first built before `initialize`, after
    /// finalization, or from another thread than the initializing one without
    /// `Threading::Multiple`.
    pub fn check_derive_equivalence_universe_state(type_name: &str) {
        use crate::lifecycle::{is_finalized, is_initialized, threading_support};
        if !is_initialized() {
            panic!(
                "\nRSMPI PANIC: Pre-MPI_Init datatype initialization\n\nApplication attempted to \
                 initialize datatype of #[derive(Equivalence)] for `{type_name}` before \
                 initializing rsmpi. You must first initialize rsmpi before attempting to use a \
                 custom type in an MPI call.\n"
            );
        }
        if is_finalized() {
            panic!(
                "\nRSMPI PANIC: Post-MPI_Finalize datatype initialization.\n\nApplication \
                 attempted to initialize datatype of #[derive(Equivalence)] for `{type_name}` \
                 after finalizing rsmpi. You must not use custom types in MPI calls after \
                 finalizing.\n"
            );
        }
        if threading_support() != crate::Threading::Multiple && !crate::lifecycle::is_init_thread() {
            panic!(
                "\nRSMPI PANIC: Invalid threaded datatype initialization\n\nApplication \
                 attempted to initialize the datatype of #[derive(Equivalence)] for \
                 `{type_name}` from a different thread than that which initialized `rsmpi`. \
                 This is only supported when rsmpi is initialized with \
                 `mpi::Threading::Multiple`.\n"
            );
        }
    }
}

// The C handle of a datatype (`crate::handles::MPI_Datatype`) is the address of its layout.
impl crate::handles::MPI_Datatype {
    pub(crate) fn of(map: &TypeMap) -> Self {
        crate::handles::MPI_Datatype(map as *const TypeMap as *const c_void)
    }
    /// The layout this handle names.
    ///
    /// # Safety
    /// The handle must be a live datatype's (not `RSMPI_DATATYPE_NULL`), and the layout must
    /// outlive `'a`.
    pub(crate) unsafe fn map<'a>(self) -> &'a TypeMap {
        // SAFETY: per the contract, the pointer came from `of` on a layout alive for `'a`.
        unsafe { &*(self.0 as *const TypeMap) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_of_one_run_are_one_block_and_bounds_take_any_sign() {
        let t = UserDatatype::contiguous(i32::MAX, &u8::equivalent_datatype());
        assert_eq!(t.type_map().blocks(), &[Block { offset: 0, len: i32::MAX as usize, kind: Primitive::U8 }]);
        assert_eq!(t.type_map().size(), i32::MAX as usize);
        let t = UserDatatype::contiguous(5, &i32::equivalent_datatype());
        assert_eq!(t.type_map().blocks(), &[Block { offset: 0, len: 20, kind: Primitive::I32 }]);
        // Resized to a lower bound of -4 and an extent of 12: copies of it are blocks apart.
        let r = UserDatatype::contiguous(1, &i32::equivalent_datatype()).with_bounds(-4, 12);
        assert_eq!((r.type_map().lb(), r.type_map().extent()), (-4, 12));
        let t = UserDatatype::contiguous(3, &r);
        let offsets: Vec<isize> = t.type_map().blocks().iter().map(|b| b.offset).collect();
        assert_eq!(offsets, vec![0, 12, 24]);
        assert_eq!((t.type_map().lb(), t.type_map().extent()), (-4, 36));
        let c = UserDatatype::primitive(Primitive::C64);
        assert_eq!((c.type_map().size(), c.type_map().homogeneous()), (16, Some(Primitive::C64)));
    }

    #[test]
    fn pairs_have_value_then_index_whatever_the_memory_layout() {
        let t = <(i32, f64)>::equivalent_datatype();
        let kinds: Vec<Primitive> = t.type_map().blocks().iter().map(|b| b.kind).collect();
        assert_eq!(kinds, vec![Primitive::I32, Primitive::F64]);
        assert_eq!(t.type_map().extent(), std::mem::size_of::<(i32, f64)>() as isize);
        let v = [(1i32, 2.5f64), (3, 4.5)];
        let mut packed = Vec::new();
        // SAFETY: `v` holds 2 initialised `(i32, f64)`, the layout `t` describes.
        unsafe { t.type_map().pack(v.as_ptr() as *const u8, 2, &mut packed) };
        assert_eq!(packed.len(), 24);
        assert_eq!(i32::from_le_bytes(packed[12..16].try_into().unwrap()), 3);
        let mut back = [(0i32, 0f64); 2];
        // SAFETY: `back` holds 2 writable `(i32, f64)`; any bytes are valid for them.
        unsafe { t.type_map().unpack(&packed, back.as_mut_ptr() as *mut u8, 2) };
        assert_eq!(back, v);
        assert!(std::ptr::eq(<(i32, f64)>::equivalent_datatype().type_map(), t.type_map()), "cached");
    }

    #[test]
    fn seeds_queries() {
        let v = UserDatatype::vector(3, 1, 2, &f64::equivalent_datatype());
        assert_eq!(v.extent(), 40);
        assert_eq!(DatatypeInfo::size(&v), 24);
        assert_eq!((v.lower_bound(), v.upper_bound()), (0, 40));
        assert!(!v.is_contiguous());
        let c = UserDatatype::contiguous(3, &i16::equivalent_datatype());
        assert!(c.is_contiguous());
        assert_eq!(i32::equivalent_datatype().extent(), 4);
    }

    #[test]
    fn kinds_are_kept_and_distinguish_types() {
        let s = UserDatatype::structured(&[1, 1], &[0, 8], &[f64::equivalent_datatype(), i32::equivalent_datatype()]);
        let kinds: Vec<Primitive> = s.type_map().blocks().iter().map(|b| b.kind).collect();
        assert_eq!(kinds, vec![Primitive::F64, Primitive::I32]);
        assert_ne!(
            i32::equivalent_datatype().type_map().fingerprint(),
            u32::equivalent_datatype().type_map().fingerprint()
        );
        assert_eq!(
            UserDatatype::contiguous(2, &i32::equivalent_datatype()).type_map().homogeneous(),
            Some(Primitive::I32)
        );
    }

    #[test]
    fn vector_layout_and_pack_roundtrip() {
        let v = UserDatatype::vector(2, 2, 3, &i32::equivalent_datatype());
        let m = v.type_map();
        assert_eq!(m.size(), 16);
        assert_eq!(m.extent(), 20); // (2-1)*3*4 + 2*4
        assert!(!m.is_contiguous());
        let src: Vec<i32> = (0..6).collect();
        let mut packed = Vec::new();
        // SAFETY: one element of `m` spans 20 bytes (5 i32) and `src` holds 6 i32.
        unsafe { m.pack(src.as_ptr() as *const u8, 1, &mut packed) };
        let vals: Vec<i32> = packed.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(vals, vec![0, 1, 3, 4]);
        let mut dst = vec![-1i32; 6];
        // SAFETY: as above, `dst` holds 6 writable i32; any bytes are valid i32s.
        unsafe { m.unpack(&packed, dst.as_mut_ptr() as *mut u8, 1) };
        assert_eq!(dst, vec![0, 1, -1, 3, 4, -1]);
    }

    #[test]
    fn contiguous_of_contiguous_is_contiguous() {
        let c = UserDatatype::contiguous(4, &f64::equivalent_datatype());
        assert!(c.type_map().is_contiguous());
        assert_eq!(c.type_map().size(), 32);
        let s = UserDatatype::structured(&[1, 1], &[0, 4], &[i32::equivalent_datatype(), f32::equivalent_datatype()]);
        assert!(s.type_map().is_contiguous());
    }

    #[test]
    fn struct_with_padding_has_gaps() {
        #[repr(C)]
        struct S {
            a: u8,
            b: u64,
        }
        let s = UserDatatype::structured(&[1, 1], &[0, 8], &[u8::equivalent_datatype(), u64::equivalent_datatype()]);
        assert_eq!(s.type_map().size(), 9);
        assert_eq!(s.type_map().extent(), std::mem::size_of::<S>() as isize);
        assert!(!s.type_map().is_contiguous());
        // trailing padding: {u64, u8} has extent 16
        let t = UserDatatype::structured(&[1, 1], &[0, 8], &[u64::equivalent_datatype(), u8::equivalent_datatype()]);
        assert_eq!(t.type_map().extent(), 16);
        assert_eq!(t.type_map().size(), 9);
    }

    #[test]
    fn bool_data_is_never_received_in_place_and_unpacks_to_0_or_1() {
        let b = bool::equivalent_datatype();
        assert!(b.type_map().has_bool() && b.type_map().is_contiguous());
        assert!(!b.type_map().receives_in_place(), "staged, so only 0 and 1 reach a bool");
        assert!(u8::equivalent_datatype().type_map().receives_in_place());
        let pair = <(bool, u8)>::equivalent_datatype();
        assert!(pair.type_map().has_bool() && !pair.type_map().receives_in_place());

        let mut dst = [false; 4];
        // SAFETY: `dst` holds 4 writable bools; unpack writes only 0 or 1 into them.
        let used = unsafe { b.type_map().unpack(&[0, 1, 2, 255], dst.as_mut_ptr() as *mut u8, 4) };
        assert_eq!(used, 4);
        assert_eq!(dst, [false, true, true, true]);

        // Mixed layout: only the bool block is normalised, the u8 keeps its value.
        let mut pairs = [(false, 0u8); 2];
        // SAFETY: `pairs` holds 2 writable `(bool, u8)`, the layout of `pair`.
        unsafe { pair.type_map().unpack(&[7, 7, 0, 9], pairs.as_mut_ptr() as *mut u8, 2) };
        assert_eq!(pairs, [(true, 7), (false, 9)]);

        let mut packed = vec![7, 7, 0, 9, 3];
        pair.type_map().fix_bools(&mut packed);
        assert_eq!(packed, [1, 7, 0, 9, 1], "bool bytes of whole and partial elements");
    }

    #[test]
    fn unpack_stops_at_the_first_block_a_short_input_does_not_hold() {
        let t = UserDatatype::structured(&[1, 1], &[0, 8], &[u32::equivalent_datatype(), u64::equivalent_datatype()]);
        let mut dst = [(0u32, 0u64); 2];
        let packed: Vec<u8> = (1..=14).collect(); // one element (12 bytes) and 2 bytes more
                                                  // SAFETY: `dst` holds 2 writable `(u32, u64)`; the map's blocks lie inside each.
        let used = unsafe { t.type_map().unpack(&packed, dst.as_mut_ptr() as *mut u8, 2) };
        assert_eq!(used, 12);
        assert_eq!(dst[1], (0, 0), "the partial element is left as it was");
    }

    #[test]
    fn downcast_checks_layout_size_and_alignment() {
        let v = [1u32, 2, 3];
        assert_eq!(DynBuffer::new(&v[..]).downcast::<u32>(), Some(&v[..]));
        assert!(DynBuffer::new(&v[..]).downcast::<i32>().is_none(), "another kind");
        // u32's blocks, placed by a datatype of another extent: refused.
        let spread = UserDatatype::contiguous(1, &u32::equivalent_datatype()).resized(8);
        // SAFETY: one element of `spread` (4 bytes of data) lies in `v`.
        let d = unsafe { DynBuffer::from_raw(v.as_ptr(), 1, spread.as_ref()) };
        assert!(d.downcast::<u32>().is_none());
        // Misaligned for u32: refused.
        let bytes = [0u8; 8];
        let p = if bytes.as_ptr() as usize % 4 == 0 { bytes[1..].as_ptr() } else { bytes.as_ptr() };
        // SAFETY: one 4-byte element lies in `bytes` after `p` (at most 1 byte in).
        let d = unsafe { DynBuffer::from_raw(p, 1, u32::equivalent_datatype()) };
        assert!(d.downcast::<u32>().is_none());
        let mut w = [5u64; 2];
        let m = DynBufferMut::new(&mut w[..]);
        m.downcast::<u64>().unwrap()[1] = 6;
        assert_eq!(w, [5, 6]);
    }

    #[test]
    fn partitions_are_checked_without_overflow() {
        let v = [0i32; 4];
        let p = Partition::new(&v[..], vec![2, 2], vec![0, 2]);
        assert_eq!(p.element_limit(), Some(4));
        let r = std::panic::catch_unwind(|| Partition::new(&v[..], vec![Count::MAX], vec![Count::MAX]));
        assert!(r.is_err(), "c + d must not wrap around");
    }
}
