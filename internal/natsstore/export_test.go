package natsstore

// HeldKey returns the copy of key the store holds, for a test to see what
// shares it.
func HeldKey(s *Store, key string) (string, bool) {
	for k := range s.keys {
		if k == key {
			return k, true
		}
	}
	return "", false
}
