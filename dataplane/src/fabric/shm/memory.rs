//! Memory: registering regions (an exposable one becomes a shared file the
//! peer maps), opening windows on them for one connection,
//! turning `(region, offset)` into the offset segments carry, and the window a
//! Write chunk is filled through (the peer's region, mapped here).

use super::*;

impl ShmFabric {
    /// [`Fabric::register_region`] for this provider.
    pub(super) fn do_register_region(
        &mut self,
        region: &Arc<mempool::region::Region>,
        access: RegionAccess,
    ) -> Result<MrKeys, FabricError> {
        let id = region.id();
        if self.regions.rkey(id).is_some() {
            return Err(FabricError::Other(format!("region {id} is already registered")));
        }
        if self.regions.count >= MAX_REGIONS {
            return Err(FabricError::QueueFull {
                what: "registered regions",
            });
        }
        let key = (self.salt as u32) << 16 | id as u32;
        let t = &mut self.regions.by_id;
        if t.len() <= id as usize {
            t.resize_with(id as usize + 1, || None);
        }
        t[id as usize] = Some(LocalRegion {
            region: Arc::clone(region),
            rkey: key,
            exposable: access == RegionAccess::Exposable,
        });
        self.regions.count += 1;
        Ok(MrKeys { lkey: key, rkey: key })
    }

    /// [`Fabric::expose`] for this provider.
    pub(super) fn do_expose(&mut self, conn: ConnId, buf: LocalBuf, access: Access) -> Result<RemoteBuf, FabricError> {
        let r = self
            .regions
            .by_id
            .get(buf.region as usize)
            .and_then(|r| r.as_ref())
            .ok_or(FabricError::NotRegistered { region: buf.region })?;
        if !r.exposable {
            return Err(FabricError::Unsupported(
                "exposing a region registered for local access",
            ));
        }
        if self.regions.resolve(&buf).is_none() {
            return Err(FabricError::BadAddress(format!("{buf:?} is outside its region")));
        }
        let ci = self.conns.index(conn.0).ok_or(FabricError::NotConnected(conn))?;
        let c = self.conns.get_mut(ci).ok_or(FabricError::NotConnected(conn))?;
        c.expose(&buf, access).ok_or(FabricError::QueueFull { what: "windows" })
    }

    /// [`Fabric::remote_addr`] for this provider.
    pub(super) fn do_remote_addr(&self, region: u16, offset: u64) -> Result<u64, FabricError> {
        let r = self
            .regions
            .by_id
            .get(region as usize)
            .and_then(|r| r.as_ref())
            .ok_or(FabricError::NotRegistered { region })?;
        if offset > r.region.len() as u64 {
            return Err(FabricError::BadAddress(format!(
                "offset {offset} beyond region {region}"
            )));
        }
        Ok(offset)
    }

    /// [`Fabric::remote_window`] for this provider.
    pub(super) fn do_remote_window(
        &mut self,
        conn: ConnId,
        seg: &RemoteBuf,
        len: u32,
    ) -> Option<std::ptr::NonNull<u8>> {
        let ci = self.conns.index(conn.0)?;
        self.conns.get(ci)?.window(seg, len)
    }
}
