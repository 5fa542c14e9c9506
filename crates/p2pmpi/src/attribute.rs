//! Communicator attributes (rsmpi's `mpi::attribute`): a value of any type implementing
//! [`CommAttribute`] can be attached to a communicator, one per type, and read back with
//! `get_attr`/`set_attr` ([`crate::topology::AnyCommunicator`]). A duplicate of the
//! communicator gets a clone of the values whose type says `CLONE_ON_DUP`.
//!
//! Unlike rsmpi, attribute types must be `Send + Sync` (a communicator may be used from any
//! thread). A value replaced by `set_attr` is kept until the communicator is freed (a
//! reference from `get_attr` may still point to it).
//!
//! Values are stored under their type's [`AttributeKey`] ([`CommAttribute::get_key`]): one
//! per type by default, handed out by this process in the order types are first used (in
//! rsmpi, by `MPI_Comm_create_keyval`). A type that overrides `get_key` shares its slot
//! with every type returning the same key; reading it as another type gives `None`.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The key of an attribute type (rsmpi's wrapper of an MPI keyval), from
/// [`CommAttribute::get_key`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttributeKey(i32);

impl AttributeKey {
    /// A key chosen by the program, for an overridden [`CommAttribute::get_key`].
    ///
    /// # Safety
    ///
    /// Nothing here can go wrong with any value (p2pmpi has no C keyvals); the function is
    /// `unsafe` as in rsmpi, where the key must be a valid MPI keyval. Keys from 1 to 2^30
    /// may be handed out by the default `get_key`: choose others to keep a slot of your own.
    pub unsafe fn new_unchecked(k: i32) -> Self {
        AttributeKey(k)
    }

    /// The key's number.
    pub fn value(&self) -> i32 {
        self.0
    }
}

/// The default keys, one per type, in the order types ask.
fn default_key(t: TypeId) -> AttributeKey {
    static KEYS: OnceLock<Mutex<HashMap<TypeId, i32>>> = OnceLock::new();
    let mut keys = KEYS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    let next = keys.len() as i32 + 1;
    AttributeKey(*keys.entry(t).or_insert(next))
}

/// A type that can be attached to a communicator as an attribute.
pub trait CommAttribute
where
    Self: 'static + Sized + Clone + Send + Sync,
{
    /// Whether `duplicate` copies the attribute (by `clone`) into the new communicator.
    const CLONE_ON_DUP: bool = false;

    /// The key this type's values are stored under: by default one of its own, the same for
    /// the whole run. Override it to share a slot between types (see [`AttributeKey`]).
    fn get_key() -> AttributeKey {
        default_key(TypeId::of::<Self>())
    }
}

/// Re-exports for `use mpi::attribute::traits::*`.
pub mod traits {
    pub use super::CommAttribute;
}

pub(crate) trait AttrValue: Any + Send + Sync {
    fn duplicate(&self) -> Option<Box<dyn AttrValue>>;
    fn as_any(&self) -> &dyn Any;
}

impl<A: CommAttribute> AttrValue for A {
    fn duplicate(&self) -> Option<Box<dyn AttrValue>> {
        A::CLONE_ON_DUP.then(|| Box::new(self.clone()) as Box<dyn AttrValue>)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The attributes of one communicator.
#[derive(Default)]
pub(crate) struct Attributes {
    values: HashMap<AttributeKey, Box<dyn AttrValue>>,
    /// Replaced values, freed with the communicator.
    replaced: Vec<Box<dyn AttrValue>>,
}

impl std::fmt::Debug for Attributes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Attributes({})", self.values.len())
    }
}

impl Attributes {
    pub fn set<A: CommAttribute>(&mut self, val: A) {
        if let Some(old) = self.values.insert(A::get_key(), Box::new(val)) {
            self.replaced.push(old);
        }
    }
    /// The address of the value of type `A`, stable until the communicator is freed.
    pub fn get<A: CommAttribute>(&self) -> Option<*const A> {
        let v = self.values.get(&A::get_key())?;
        v.as_any().downcast_ref::<A>().map(|a| a as *const A)
    }
    /// The attributes a duplicate gets.
    pub fn for_duplicate(&self) -> Attributes {
        let values = self.values.iter().filter_map(|(k, v)| v.duplicate().map(|d| (k.clone(), d))).collect();
        Attributes { values, replaced: Vec::new() }
    }
}
