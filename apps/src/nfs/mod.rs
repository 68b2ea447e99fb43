//! NFSv3 and MOUNT services: being written.
