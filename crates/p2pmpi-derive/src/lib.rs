//! `#[derive(Equivalence)]` for [p2pmpi](https://docs.rs/p2pmpi), compatible with rsmpi's
//! `mpi-derive`.
//!
//! Use it through the `derive` feature of p2pmpi, usually under rsmpi's crate name:
//!
//! ```toml
//! mpi = { package = "p2pmpi", version = "0.1", features = ["derive"] }
//! ```
//!
//! ```ignore
//! use mpi::traits::*;
//!
//! #[derive(Equivalence)]
//! struct Particle {
//!     id: u32,
//!     pos: [f64; 3],
//!     charge: (i8, f32),
//! }
//! ```
//!
//! # What is generated
//!
//! An `unsafe impl Equivalence` whose datatype is a *structured* datatype
//! (`MPI_Type_create_struct`): one block of length 1 per field, at the field's byte offset
//! (`core::mem::offset_of!`, so Rust's field reordering is respected and padding bytes are never
//! read or written), with the field's own datatype, resized to the struct's `size_of` (lower
//! bound 0) so that arrays of the struct line up even when it is over-aligned or packed:
//!
//! - a type `T` (a primitive or another derived struct): `<T as Equivalence>::equivalent_datatype()`;
//! - an array `[E; N]`: a *contiguous* datatype of `N` copies of `E`'s datatype (recursively, so
//!   arrays of arrays and arrays of tuples work; `N` must fit in a `Count`, which is checked
//!   when the datatype is built);
//! - a tuple `(X, Y, ..)`: a structured datatype built from the tuple's own field offsets,
//!   resized to the tuple's size;
//!   `()` (and a unit struct) is a structured datatype with no fields.
//!
//! Named structs, tuple structs and unit structs are supported. Enums, unions and fields of
//! types that cannot be sent as plain data (references, raw pointers, slices, function
//! pointers, trait objects, ...) are rejected with a compile error.
//!
//! For a non-generic struct `Foo` the expansion has the same shape as rsmpi's (plus the
//! `resized`):
//!
//! ```ignore
//! unsafe impl ::mpi::datatype::Equivalence for Foo {
//!     type Out = ::mpi::datatype::DatatypeRef<'static>;
//!     fn equivalent_datatype() -> Self::Out {
//!         static DATATYPE: OnceLock<::mpi::datatype::UserDatatype> = OnceLock::new();
//!         UserDatatype::as_ref(DATATYPE.get_or_init(|| {
//!             ::mpi::datatype::internal::check_derive_equivalence_universe_state("Foo");
//!             ::mpi::datatype::UserDatatype::structured::<UncommittedDatatypeRef<'_>>(
//!                 &[1, ..],
//!                 &[offset_of!(Foo, a) as ::mpi::Address, ..],
//!                 &[UncommittedDatatypeRef::from(<A as Equivalence>::equivalent_datatype()), ..],
//!             )
//!             .resized(size_of::<Foo>())
//!         }))
//!     }
//! }
//! ```
//!
//! # Why the datatype is cached
//!
//! `equivalent_datatype()` is called on every send and receive, while building the datatype
//! allocates and walks the type maps of every field. The committed datatype is therefore built
//! once, on first use, and kept in a `static` for the rest of the program (it is never freed,
//! as in rsmpi), so later calls only hand out a `DatatypeRef<'static>` to it. Building on first
//! use (rather than eagerly) is what lets the library check the MPI state at that moment: the
//! first use must come after `mpi::initialize()`, before finalization, and from the
//! initializing thread unless the library runs with `Threading::Multiple`; otherwise it panics
//! with rsmpi's messages. Later uses are not checked again. (rsmpi caches in a `Lazy`, which is
//! poisoned by that panic; here a `OnceLock` stays empty, so a caught panic can be followed by
//! a successful first use once the library is initialized.)
//!
//! # Generic structs
//!
//! Unlike rsmpi, generic structs are supported. Each field type that mentions a type or const
//! parameter gets a `where FieldType: Equivalence` bound, and the struct must be `'static`.
//! A `static` inside a generic function is shared by all instantiations, so the cache is a
//! map from the instantiation's `TypeId` to its datatype (built once per instantiation and
//! leaked, like the non-generic cache). `Out` is still `DatatypeRef<'static>`, so generic
//! derived structs can be nested in other derived structs. Fields whose type mentions a
//! parameter may use any `Equivalence` implementation, whatever its `Out` type.
//!
//! # The path of the `mpi` crate
//!
//! The generated code names p2pmpi by the name it has in the user's `Cargo.toml` (found with
//! `proc-macro-crate`: `::mpi` when renamed as above, `::p2pmpi` otherwise), falling back to
//! `::mpi`. Like rsmpi, `#[mpi(crate = "path::to::mpi")]` on the struct overrides it, e.g. when
//! p2pmpi is re-exported by another crate.
#![forbid(unsafe_code)]

extern crate proc_macro;

use std::collections::HashSet;

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2, TokenTree};
use proc_macro_crate::{crate_name, FoundCrate};
use quote::{quote, ToTokens};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{parse_macro_input, Data, DeriveInput, GenericParam, Ident, Index, LitStr, Member, Path, Type};

/// Derives `Equivalence` for a struct whose fields all have an equivalent datatype (see the
/// crate documentation).
///
/// The optional struct attribute `#[mpi(crate = "path::to::mpi")]` sets the path under which
/// the p2pmpi crate is reached.
#[proc_macro_derive(Equivalence, attributes(mpi))]
pub fn derive_equivalence(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(tokens) => tokens.into(),
        Err(err) => err.to_compile_error().into(),
    }
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let krate = crate_path(&input.attrs)?;
    let fields = match &input.data {
        Data::Struct(s) => &s.fields,
        Data::Enum(e) => return Err(syn::Error::new(
            e.enum_token.span,
            "#[derive(Equivalence)] is not compatible with enums: only structs (named, tuple or unit) are supported",
        )),
        Data::Union(u) => return Err(syn::Error::new(
            u.union_token.span,
            "#[derive(Equivalence)] is not compatible with unions: only structs (named, tuple or unit) are supported",
        )),
    };

    let name = &input.ident;
    let generic = !input.generics.params.is_empty();
    let mut gen = Generator {
        krate: &krate,
        params: input
            .generics
            .params
            .iter()
            .filter_map(|p| match p {
                GenericParam::Type(t) => Some(t.ident.unraw().to_string()),
                GenericParam::Const(c) => Some(c.ident.unraw().to_string()),
                GenericParam::Lifetime(_) => None,
            })
            .collect(),
        bounds: Vec::new(),
    };

    // Inside the `static` of the non-generic expansion `Self` cannot be named.
    let container = if generic { quote!(Self) } else { name.to_token_stream() };

    let mut error: Option<syn::Error> = None;
    let mut members = Vec::new();
    let mut datatypes = Vec::new();
    for (i, field) in fields.iter().enumerate() {
        for attr in field.attrs.iter().filter(|a| a.path().is_ident("mpi")) {
            push_error(
                &mut error,
                syn::Error::new_spanned(attr, "#[mpi(...)] is only supported on the struct itself, not on fields"),
            );
        }
        let (member, label) = match &field.ident {
            Some(ident) => (Member::Named(ident.clone()), ident.unraw().to_string()),
            None => (Member::Unnamed(Index { index: i as u32, span: field.ty.span() }), i.to_string()),
        };
        match gen.datatype(&field.ty, &label) {
            Ok(dt) => {
                members.push(member);
                datatypes.push(dt);
            }
            Err(e) => push_error(&mut error, e),
        }
    }
    if let Some(error) = error {
        return Err(error);
    }

    let build = gen.structured(&container, &members, &datatypes);
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let equivalence = quote!(#krate::datatype::Equivalence);
    let user_datatype = quote!(#krate::datatype::UserDatatype);
    let check = quote!(#krate::datatype::internal::check_derive_equivalence_universe_state);

    if !generic {
        let type_name = LitStr::new(&name.unraw().to_string(), name.span());
        return Ok(quote! {
            #[automatically_derived]
            unsafe impl #equivalence for #name {
                type Out = #krate::datatype::DatatypeRef<'static>;

                fn equivalent_datatype() -> Self::Out {
                    static DATATYPE: ::std::sync::OnceLock<#user_datatype> = ::std::sync::OnceLock::new();
                    #user_datatype::as_ref(DATATYPE.get_or_init(|| {
                        #check(#type_name);
                        #build
                    }))
                }
            }
        });
    }

    let mut where_clause = where_clause
        .cloned()
        .unwrap_or_else(|| syn::WhereClause { where_token: Default::default(), predicates: Default::default() });
    let mut seen = HashSet::new();
    for ty in &gen.bounds {
        if seen.insert(ty.to_token_stream().to_string()) {
            where_clause.predicates.push(syn::parse_quote!(#ty: #equivalence));
        }
    }
    where_clause.predicates.push(syn::parse_quote!(#name #ty_generics: 'static));

    Ok(quote! {
        #[automatically_derived]
        unsafe impl #impl_generics #equivalence for #name #ty_generics #where_clause {
            type Out = #krate::datatype::DatatypeRef<'static>;

            fn equivalent_datatype() -> Self::Out {
                // Shared by every instantiation of this impl: keyed by the instantiation's type.
                static DATATYPES: ::std::sync::RwLock<
                    ::std::collections::BTreeMap<::core::any::TypeId, &'static #user_datatype>,
                > = ::std::sync::RwLock::new(::std::collections::BTreeMap::new());

                let key = ::core::any::TypeId::of::<Self>();
                let cached = DATATYPES
                    .read()
                    .unwrap_or_else(::std::sync::PoisonError::into_inner)
                    .get(&key)
                    .copied();
                if let ::core::option::Option::Some(datatype) = cached {
                    return #user_datatype::as_ref(datatype);
                }
                // Built without holding the lock: field datatypes may be other instantiations
                // of this same impl.
                #check(::core::any::type_name::<Self>());
                let built: #user_datatype = #build;
                let datatype: &'static #user_datatype = *DATATYPES
                    .write()
                    .unwrap_or_else(::std::sync::PoisonError::into_inner)
                    .entry(key)
                    .or_insert_with(|| ::std::boxed::Box::leak(::std::boxed::Box::new(built)));
                #user_datatype::as_ref(datatype)
            }
        }
    })
}

/// A type as written, without most of the spaces `TokenStream::to_string` puts between tokens.
fn display_type(ty: &Type) -> String {
    let mut shown = ty.to_token_stream().to_string();
    for (from, to) in [
        ("& ", "&"),
        ("* const ", "*const "),
        ("* mut ", "*mut "),
        (" ,", ","),
        (" ;", ";"),
        ("< ", "<"),
        (" <", "<"),
        (" >", ">"),
        (" :: ", "::"),
        (":: ", "::"),
        ("( ", "("),
        (" )", ")"),
        ("[ ", "["),
        (" ]", "]"),
    ] {
        shown = shown.replace(from, to);
    }
    shown
}

fn push_error(acc: &mut Option<syn::Error>, err: syn::Error) {
    match acc {
        Some(acc) => acc.combine(err),
        None => *acc = Some(err),
    }
}

/// The path of the p2pmpi crate: `#[mpi(crate = "...")]`, else its name in the user's
/// `Cargo.toml`, else `::mpi`.
fn crate_path(attrs: &[syn::Attribute]) -> syn::Result<Path> {
    let mut path: Option<Path> = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("mpi")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                let lit: LitStr = meta.value()?.parse()?;
                if path.is_some() {
                    return Err(syn::Error::new(lit.span(), "duplicate #[mpi(crate = \"...\")] attribute"));
                }
                let parsed = lit.parse().map_err(|e| {
                    syn::Error::new(
                        lit.span(),
                        format!("#[mpi(crate = \"...\")] must be a path such as \"::mpi\": {e}"),
                    )
                })?;
                path = Some(parsed);
                Ok(())
            } else {
                Err(meta.error("unknown #[mpi(...)] attribute: expected `crate = \"path::to::mpi\"`"))
            }
        })?;
    }
    if let Some(path) = path {
        return Ok(path);
    }
    let name = match crate_name("p2pmpi") {
        // The derive is not used inside p2pmpi's library itself, but may be in its examples and
        // tests, where the library is an external crate named `p2pmpi`.
        Ok(FoundCrate::Itself) => "p2pmpi".to_string(),
        Ok(FoundCrate::Name(name)) => name,
        Err(_) => "mpi".to_string(),
    };
    let ident = Ident::new(&name, Span::call_site());
    Ok(syn::parse_quote!(::#ident))
}

/// Builds the datatype expressions of field types.
struct Generator<'a> {
    krate: &'a Path,
    /// Names of the struct's type and const parameters.
    params: HashSet<String>,
    /// Leaf field types that mention a parameter: each needs a `T: Equivalence` bound.
    bounds: Vec<Type>,
}

impl Generator<'_> {
    /// `UserDatatype::structured(..)` of the given members of `container`, resized to the
    /// container's size (lb 0, extent `size_of`), so that `n` elements are exactly an array
    /// of `n` containers even when it is over-aligned or packed (the padded extent of
    /// `MPI_Type_create_struct` would then differ from Rust's size), as `Equivalence`
    /// requires.
    fn structured(&self, container: &TokenStream2, members: &[Member], datatypes: &[TokenStream2]) -> TokenStream2 {
        let krate = self.krate;
        let ones = members.iter().map(|_| quote!(1));
        quote! {
            #krate::datatype::UserDatatype::structured::<#krate::datatype::UncommittedDatatypeRef<'_>>(
                &[#(#ones),*],
                &[#(::core::mem::offset_of!(#container, #members) as #krate::Address),*],
                &[#(#datatypes),*],
            )
            .resized(::core::mem::size_of::<#container>())
        }
    }

    /// An expression of type `UncommittedDatatypeRef<'_>` for the datatype of `ty`. Temporaries
    /// it borrows from live until the end of the enclosing statement, i.e. the `structured` call.
    fn datatype(&mut self, ty: &Type, field: &str) -> syn::Result<TokenStream2> {
        let krate = self.krate;
        let dref = quote!(#krate::datatype::UncommittedDatatypeRef);
        let udt = quote!(#krate::datatype::UncommittedUserDatatype);
        let kind = match ty {
            Type::Paren(p) => return self.datatype(&p.elem, field),
            Type::Group(g) => return self.datatype(&g.elem, field),
            Type::Array(array) => {
                let elem = self.datatype(&array.elem, field)?;
                let len = &array.len;
                let message = format!(
                    "#[derive(Equivalence)]: the length of the array in field `{field}` exceeds the range of `Count`"
                );
                return Ok(quote! {
                    #dref::from(&#udt::contiguous(
                        <#krate::Count as ::core::convert::TryFrom<usize>>::try_from(#len).expect(#message),
                        &#elem,
                    ))
                });
            }
            Type::Tuple(tuple) => {
                let mut members = Vec::new();
                let mut datatypes = Vec::new();
                for (i, elem) in tuple.elems.iter().enumerate() {
                    members.push(Index { index: i as u32, span: elem.span() });
                    datatypes.push(self.datatype(elem, field)?);
                }
                let ones = members.iter().map(|_| quote!(1));
                // Resized to the tuple's size, as a struct is (arrays of tuples need it).
                let committed = quote!(#krate::datatype::UserDatatype);
                return Ok(quote! {
                    #dref::from(&#committed::structured::<#dref<'_>>(
                        &[#(#ones),*],
                        &[#(::core::mem::offset_of!(#tuple, #members) as #krate::Address),*],
                        &[#(#datatypes),*],
                    ).resized(::core::mem::size_of::<#tuple>()))
                });
            }
            Type::Path(_) | Type::Macro(_) | Type::Verbatim(_) => {
                let equivalence = quote!(#krate::datatype::Equivalence);
                if self.mentions_param(ty.to_token_stream()) {
                    // `<T as Equivalence>::Out` is unknown here: rebuild it (once) as an owned
                    // datatype, which works for any `Out: Datatype`.
                    self.bounds.push(ty.clone());
                    return Ok(quote! {
                        #dref::from(&#udt::contiguous(1, &<#ty as #equivalence>::equivalent_datatype()))
                    });
                }
                return Ok(quote!(#dref::from(<#ty as #equivalence>::equivalent_datatype())));
            }
            Type::Reference(_) => "references",
            Type::Ptr(_) => "raw pointers",
            Type::Slice(_) => "slices",
            Type::BareFn(_) => "function pointers",
            Type::TraitObject(_) => "trait objects",
            Type::ImplTrait(_) => "`impl Trait` types",
            Type::Never(_) => "the never type",
            Type::Infer(_) => "inferred types",
            _ => "types of this kind",
        };
        let shown = display_type(ty);
        Err(syn::Error::new_spanned(
            ty,
            format!(
                "#[derive(Equivalence)]: field `{field}` has unsupported type `{shown}`: {kind} have no \
                 equivalent MPI datatype (fields must implement `Equivalence`, or be arrays or tuples of such types)"
            ),
        ))
    }

    /// Whether the tokens name one of the struct's type or const parameters.
    fn mentions_param(&self, tokens: TokenStream2) -> bool {
        tokens.into_iter().any(|tt| match tt {
            TokenTree::Ident(ident) => ident == "Self" || self.params.contains(&ident.unraw().to_string()),
            TokenTree::Group(group) => self.mentions_param(group.stream()),
            _ => false,
        })
    }
}
