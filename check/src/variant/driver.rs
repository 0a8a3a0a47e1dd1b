//! The driver variants: the store is the correct one, and the driver changes what it feeds
//! the attempt machine, or sends on its own, at an abnormal end (MODEL.md, rule 11).

use super::Variant;

impl Variant {
    /// Whether the variant is the driver's (the store is then the correct one).
    pub fn is_driver(self) -> bool {
        matches!(
            self,
            Variant::ReleaseOnAbandon | Variant::PanicReleases | Variant::CorruptFailsOpen
        )
    }

    /// Whether the driver, when an attached call is dropped while its action runs, releases
    /// the key itself after abandoning the attempt ([`Variant::ReleaseOnAbandon`]).
    pub fn releases_on_abandon(self) -> bool {
        self == Variant::ReleaseOnAbandon
    }

    /// Whether the driver feeds a panic as a failure ([`Variant::PanicReleases`]).
    pub fn feeds_panic_as_failure(self) -> bool {
        self == Variant::PanicReleases
    }

    /// Whether the driver feeds a "corrupt record" answer as a store failure
    /// ([`Variant::CorruptFailsOpen`]).
    pub fn feeds_corrupt_as_store_error(self) -> bool {
        self == Variant::CorruptFailsOpen
    }
}
