package store

// SetSyncFault makes a badger store's syncs call f first and fail with
// its error, if any (nil f: no more faults).
func SetSyncFault(st Store, f func() error) {
	s := st.(*badgerStore)
	if f == nil {
		s.syncFault.Store(nil)
		return
	}
	s.syncFault.Store(&f)
}
