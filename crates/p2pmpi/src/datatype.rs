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

use crate::Count;
use std::os::raw::c_void;
use std::sync::Arc;

/// `MPI_Aint`: a byte displacement.
pub type Address = isize;

/// The layout of one element of a datatype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeMap {
    /// (offset from the element's base, length) of each data block, in order.
    blocks: Vec<(isize, usize)>,
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
    /// One contiguous block of `size` bytes.
    pub const fn primitive(size: usize) -> TypeMap {
        TypeMap { blocks: Vec::new(), size, lb: 0, extent: size as isize, align: if size == 0 { 1 } else { size } }
    }

    fn from_blocks(mut raw: Vec<(isize, usize)>, lb: isize, ub: isize, align: usize) -> TypeMap {
        raw.retain(|b| b.1 > 0);
        // Merge adjacent blocks (keeping order, which defines the packed layout).
        let mut blocks: Vec<(isize, usize)> = Vec::with_capacity(raw.len());
        for (o, l) in raw {
            match blocks.last_mut() {
                Some(last) if last.0 + last.1 as isize == o => last.1 += l,
                _ => blocks.push((o, l)),
            }
        }
        let size = blocks.iter().map(|b| b.1).sum();
        let mut m = TypeMap { blocks, size, lb, extent: ub - lb, align };
        if m.blocks.len() == 1 && m.blocks[0] == (0, m.size) {
            m.blocks.clear(); // canonical contiguous form
        }
        m
    }

    fn blocks(&self) -> std::borrow::Cow<'_, [(isize, usize)]> {
        if self.blocks.is_empty() && self.size > 0 {
            std::borrow::Cow::Owned(vec![(0, self.size)])
        } else {
            std::borrow::Cow::Borrowed(&self.blocks)
        }
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
    /// Whether `count` elements occupy exactly `count * size` bytes with no gap.
    pub fn is_contiguous(&self) -> bool {
        self.blocks.is_empty() && self.lb == 0 && self.extent == self.size as isize
    }

    /// The map of `count` copies of `old` placed at the given byte displacements
    /// (`(displacement, repetitions)` pairs), the building block of every constructor.
    fn compose(parts: &[(isize, usize, &TypeMap)]) -> TypeMap {
        let mut raw = Vec::new();
        let mut align = 1;
        let (mut lb, mut ub) = (isize::MAX, isize::MIN);
        for &(disp, reps, old) in parts {
            if reps == 0 {
                continue;
            }
            let ob = old.blocks();
            for i in 0..reps as isize {
                let base = disp + i * old.extent;
                for &(o, l) in ob.iter() {
                    raw.push((base + o, l));
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
            if self.blocks.is_empty() && self.size > 0 {
                self.blocks = vec![(0, self.size)];
            }
        }
        self
    }

    /// Copies `count` elements at `src` into the packed buffer `out`.
    ///
    /// # Safety
    /// `src` must point to `count` valid elements of this layout.
    pub unsafe fn pack(&self, src: *const u8, count: usize, out: &mut Vec<u8>) {
        if self.is_contiguous() {
            out.extend_from_slice(std::slice::from_raw_parts(src, count * self.size));
            return;
        }
        let blocks = self.blocks();
        out.reserve(count * self.size);
        for i in 0..count as isize {
            let base = src.offset(i * self.extent);
            for &(o, l) in blocks.iter() {
                out.extend_from_slice(std::slice::from_raw_parts(base.offset(o), l));
            }
        }
    }

    /// Copies packed data into `count` elements at `dst`; returns the bytes consumed.
    ///
    /// # Safety
    /// `dst` must point to `count` writable elements of this layout.
    pub unsafe fn unpack(&self, packed: &[u8], dst: *mut u8, count: usize) -> usize {
        let mut pos = 0;
        let blocks = self.blocks();
        'outer: for i in 0..count as isize {
            let base = dst.offset(i * self.extent);
            for &(o, l) in blocks.iter() {
                if pos + l > packed.len() {
                    break 'outer;
                }
                std::ptr::copy_nonoverlapping(packed.as_ptr().add(pos), base.offset(o), l);
                pos += l;
            }
        }
        pos
    }
}

macro_rules! primitive_maps {
    ($($name:ident = $n:expr;)*) => { $( static $name: TypeMap = TypeMap::primitive($n); )* };
}
primitive_maps! { MAP1 = 1; MAP2 = 2; MAP4 = 4; MAP8 = 8; MAP16 = 16; }

/// Common behaviour of datatype handles, committed or not (rsmpi's `UncommittedDatatype`).
pub trait UncommittedDatatype {
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
pub struct DatatypeRef<'a> {
    map: &'a TypeMap,
}

/// The datatypes of the primitive types.
pub type SystemDatatype = DatatypeRef<'static>;

impl<'a> DatatypeRef<'a> {
    /// Extent of one element in bytes.
    pub fn extent(&self) -> Address {
        self.map.extent
    }
    /// Bytes of data in one element.
    pub fn size(&self) -> Count {
        self.map.size as Count
    }
}

impl UncommittedDatatype for DatatypeRef<'_> {
    type DuplicatedDatatype = UserDatatype;
    fn dup(&self) -> UserDatatype {
        UserDatatype { map: Arc::new(self.map.clone()) }
    }
    fn type_map(&self) -> &TypeMap {
        self.map
    }
}
impl Datatype for DatatypeRef<'_> {}

/// A borrowed datatype that may not be committed (used to build other datatypes).
#[derive(Copy, Clone, Debug)]
pub struct UncommittedDatatypeRef<'a> {
    map: &'a TypeMap,
}

impl UncommittedDatatype for UncommittedDatatypeRef<'_> {
    type DuplicatedDatatype = UncommittedUserDatatype;
    fn dup(&self) -> UncommittedUserDatatype {
        UncommittedUserDatatype { map: Arc::new(self.map.clone()) }
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
        DatatypeRef { map: &d.map }
    }
}
impl<'a> From<&'a UserDatatype> for UncommittedDatatypeRef<'a> {
    fn from(d: &'a UserDatatype) -> Self {
        UncommittedDatatypeRef { map: &d.map }
    }
}
impl<'a> From<&'a UncommittedUserDatatype> for UncommittedDatatypeRef<'a> {
    fn from(d: &'a UncommittedUserDatatype) -> Self {
        UncommittedDatatypeRef { map: &d.map }
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
            pub fn structured<D: UncommittedDatatype>(
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

/// An owned, committed, user-defined datatype.
#[derive(Debug, Clone)]
pub struct UserDatatype {
    map: Arc<TypeMap>,
}

impl UserDatatype {
    fn of(map: TypeMap) -> Self {
        UserDatatype { map: Arc::new(map) }
    }
    /// A borrowed handle.
    pub fn as_ref(&self) -> DatatypeRef<'_> {
        DatatypeRef { map: &self.map }
    }
}
constructors!(UserDatatype);

impl UncommittedDatatype for UserDatatype {
    type DuplicatedDatatype = UserDatatype;
    fn dup(&self) -> UserDatatype {
        self.clone()
    }
    fn type_map(&self) -> &TypeMap {
        &self.map
    }
}
impl Datatype for UserDatatype {}

/// An owned user-defined datatype that is not committed yet.
#[derive(Debug, Clone)]
pub struct UncommittedUserDatatype {
    map: Arc<TypeMap>,
}

impl UncommittedUserDatatype {
    fn of(map: TypeMap) -> Self {
        UncommittedUserDatatype { map: Arc::new(map) }
    }
    /// Commits the datatype so it can be used in communication.
    pub fn commit(self) -> UserDatatype {
        UserDatatype { map: self.map }
    }
    /// A borrowed handle.
    pub fn as_ref(&self) -> UncommittedDatatypeRef<'_> {
        UncommittedDatatypeRef { map: &self.map }
    }
}
constructors!(UncommittedUserDatatype);

impl UncommittedDatatype for UncommittedUserDatatype {
    type DuplicatedDatatype = UncommittedUserDatatype;
    fn dup(&self) -> UncommittedUserDatatype {
        self.clone()
    }
    fn type_map(&self) -> &TypeMap {
        &self.map
    }
}

/// A type with an equivalent datatype: values of it can be sent and received.
///
/// # Safety
/// The datatype must describe exactly the bytes of `Self` that hold data, and every bit pattern
/// received for them must be a valid value.
pub unsafe trait Equivalence {
    /// The datatype handle type.
    type Out: Datatype;
    /// The datatype of `Self`.
    fn equivalent_datatype() -> Self::Out;
}

macro_rules! equivalence {
    ($($t:ty => $map:ident),* $(,)?) => {$(
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
    bool => MAP1, i8 => MAP1, u8 => MAP1,
    i16 => MAP2, u16 => MAP2,
    i32 => MAP4, u32 => MAP4, f32 => MAP4,
    i64 => MAP8, u64 => MAP8, f64 => MAP8,
    i128 => MAP16, u128 => MAP16,
}
#[cfg(target_pointer_width = "64")]
equivalence! { isize => MAP8, usize => MAP8 }
#[cfg(target_pointer_width = "32")]
equivalence! { isize => MAP4, usize => MAP4 }
#[cfg(feature = "complex")]
equivalence! { num_complex::Complex32 => MAP8, num_complex::Complex64 => MAP16 }

/// Something whose datatype is known.
///
/// # Safety
/// The datatype must describe the memory the value points to.
pub unsafe trait AsDatatype {
    type Out: Datatype;
    fn as_datatype(&self) -> Self::Out;
}

/// Something with a number of elements.
///
/// # Safety
/// The count must not exceed the memory the value points to.
pub unsafe trait Collection {
    fn count(&self) -> Count;
}

/// Something with an address.
///
/// # Safety
/// The pointer must be valid for reads of the described data.
pub unsafe trait Pointer {
    fn pointer(&self) -> *const c_void;
}

/// Something with a mutable address.
///
/// # Safety
/// The pointer must be valid for writes of the described data.
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

macro_rules! buffers {
    ($([$($g:tt)*] $t:ty, $count:expr;)*) => {$(
        unsafe impl<$($g)*> AsDatatype for $t {
            type Out = <T as Equivalence>::Out;
            fn as_datatype(&self) -> Self::Out { T::equivalent_datatype() }
        }
        unsafe impl<$($g)*> Collection for $t {
            #[allow(clippy::redundant_closure_call)]
            fn count(&self) -> Count { ($count)(self) }
        }
        unsafe impl<$($g)*> Pointer for $t {
            fn pointer(&self) -> *const c_void { self as *const Self as *const T as *const c_void }
        }
        unsafe impl<$($g)*> PointerMut for $t {
            fn pointer_mut(&mut self) -> *mut c_void { self as *mut Self as *mut T as *mut c_void }
        }
        unsafe impl<$($g)*> Buffer for $t {}
        unsafe impl<$($g)*> BufferMut for $t {}
    )*};
}
buffers! {
    [T: Equivalence] T, |_: &T| 1;
    [T: Equivalence, const N: usize] [T; N], |_: &[T; N]| N as Count;
}

unsafe impl<T: Equivalence> AsDatatype for [T] {
    type Out = T::Out;
    fn as_datatype(&self) -> T::Out {
        T::equivalent_datatype()
    }
}
unsafe impl<T: Equivalence> Collection for [T] {
    fn count(&self) -> Count {
        self.len().try_into().expect("buffer length exceeds the range of a Count")
    }
}
unsafe impl<T: Equivalence> Pointer for [T] {
    fn pointer(&self) -> *const c_void {
        self.as_ptr() as _
    }
}
unsafe impl<T: Equivalence> PointerMut for [T] {
    fn pointer_mut(&mut self) -> *mut c_void {
        self.as_mut_ptr() as _
    }
}
unsafe impl<T: Equivalence> Buffer for [T] {}
unsafe impl<T: Equivalence> BufferMut for [T] {}

unsafe impl<T: Equivalence> AsDatatype for Vec<T> {
    type Out = T::Out;
    fn as_datatype(&self) -> T::Out {
        T::equivalent_datatype()
    }
}
unsafe impl<T: Equivalence> Collection for Vec<T> {
    fn count(&self) -> Count {
        self[..].count()
    }
}
unsafe impl<T: Equivalence> Pointer for Vec<T> {
    fn pointer(&self) -> *const c_void {
        self.as_ptr() as _
    }
}
unsafe impl<T: Equivalence> PointerMut for Vec<T> {
    fn pointer_mut(&mut self) -> *mut c_void {
        self.as_mut_ptr() as _
    }
}
unsafe impl<T: Equivalence> Buffer for Vec<T> {}
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
    /// `count` elements of `datatype` must fit in `buffer`.
    pub unsafe fn with_count_and_datatype(buffer: &'b B, count: Count, datatype: &'d D) -> Self {
        View { datatype, count, buffer }
    }
}
unsafe impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + Pointer> AsDatatype for View<'d, 'b, D, B> {
    type Out = &'d D;
    fn as_datatype(&self) -> &'d D {
        self.datatype
    }
}
unsafe impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + Pointer> Collection for View<'d, 'b, D, B> {
    fn count(&self) -> Count {
        self.count
    }
}
unsafe impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + Pointer> Pointer for View<'d, 'b, D, B> {
    fn pointer(&self) -> *const c_void {
        self.buffer.pointer()
    }
}
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
    /// `count` elements of `datatype` must fit in `buffer`.
    pub unsafe fn with_count_and_datatype(buffer: &'b mut B, count: Count, datatype: &'d D) -> Self {
        MutView { datatype, count, buffer }
    }
}
unsafe impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + PointerMut> AsDatatype for MutView<'d, 'b, D, B> {
    type Out = &'d D;
    fn as_datatype(&self) -> &'d D {
        self.datatype
    }
}
unsafe impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + PointerMut> Collection for MutView<'d, 'b, D, B> {
    fn count(&self) -> Count {
        self.count
    }
}
unsafe impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + PointerMut> PointerMut for MutView<'d, 'b, D, B> {
    fn pointer_mut(&mut self) -> *mut c_void {
        self.buffer.pointer_mut()
    }
}
unsafe impl<'d, 'b, D: 'd + Datatype, B: 'b + ?Sized + PointerMut> BufferMut for MutView<'d, 'b, D, B> {}

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
        use crate::environment::{is_finalized, is_initialized, threading_support};
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
        if threading_support() != crate::Threading::Multiple && !crate::environment::is_init_thread() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_layout_and_pack_roundtrip() {
        let v = UserDatatype::vector(2, 2, 3, &i32::equivalent_datatype());
        let m = v.type_map();
        assert_eq!(m.size(), 16);
        assert_eq!(m.extent(), 20); // (2-1)*3*4 + 2*4
        assert!(!m.is_contiguous());
        let src: Vec<i32> = (0..6).collect();
        let mut packed = Vec::new();
        unsafe { m.pack(src.as_ptr() as *const u8, 1, &mut packed) };
        let vals: Vec<i32> = packed.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(vals, vec![0, 1, 3, 4]);
        let mut dst = vec![-1i32; 6];
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
}
