//! The camera port's leases in the catalog, so a camera gets its address back after a
//! restart of the box.
//!
//! Table `camport_leases`: client id → [`Lease`] (JSON). Only acknowledged leases are kept;
//! at most [`limits::CAMPORT_LEASES_MAX`] are read back.

use redb::{Durability, ReadableDatabase, ReadableTable, TableDefinition};

use super::{Catalog, CatalogError, OrStorage};
use crate::camport::leases::Lease;
use crate::limits;

pub(super) const CAMPORT_LEASES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("camport_leases");

impl Catalog {
    /// The leases kept, at most [`limits::CAMPORT_LEASES_MAX`]. A row that does not read as
    /// a lease is skipped and logged: one bad row must not keep the port from serving.
    pub fn camport_leases(&self) -> Result<Vec<Lease>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(CAMPORT_LEASES).storage()?;
        let mut out = Vec::new();
        for entry in t.iter().storage()?.take(limits::CAMPORT_LEASES_MAX) {
            let (_, v) = entry.storage()?;
            match serde_json::from_slice::<Lease>(v.value()) {
                Ok(lease) => out.push(lease),
                Err(e) => tracing::warn!(error = %e, "camera port: a stored lease that is not one, skipped"),
            }
        }
        Ok(out)
    }

    /// Keeps `put` and forgets the leases of `gone` (client ids); `durable`: on the disk
    /// before it returns, with every write before it (else the next durable commit of the
    /// catalog carries it).
    pub fn set_camport_leases(&self, put: &[Lease], gone: &[Vec<u8>], durable: bool) -> Result<(), CatalogError> {
        let mut txn = self.db()?.begin_write().storage()?;
        txn.set_durability(if durable { Durability::Immediate } else { Durability::None }).storage()?;
        {
            let mut t = txn.open_table(CAMPORT_LEASES).storage()?;
            for l in put {
                let json = serde_json::to_vec(l).expect("a lease serializes");
                t.insert(l.client.as_slice(), json.as_slice()).storage()?;
            }
            for c in gone {
                t.remove(c.as_slice()).storage()?;
            }
        }
        txn.commit().storage()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_kept_come_back_and_forgotten_ones_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.redb");
        let lease = |n: u8| Lease {
            client: vec![1, n],
            mac: [2, 0, 0, 0, 0, n],
            ip: std::net::Ipv4Addr::new(10, 71, 0, 100 + n),
            until_us: 1_000,
            bound: true,
            hostname: Some(format!("cam{n}")),
        };
        {
            let c = Catalog::open(&path).unwrap();
            assert!(c.camport_leases().unwrap().is_empty());
            c.set_camport_leases(&[lease(1), lease(2)], &[], false).unwrap();
            c.set_camport_leases(&[], &[vec![1, 1]], true).unwrap();
        }
        let c = Catalog::open(&path).unwrap();
        assert_eq!(c.camport_leases().unwrap(), vec![lease(2)]);
        // A row that is not a lease is skipped; the others are read.
        let txn = c.db().unwrap().begin_write().unwrap();
        txn.open_table(CAMPORT_LEASES).unwrap().insert([9u8].as_slice(), b"{\"client\":".as_slice()).unwrap();
        txn.commit().unwrap();
        assert_eq!(c.camport_leases().unwrap(), vec![lease(2)]);
    }
}
