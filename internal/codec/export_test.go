package codec

// Registered is the registry of every domain event type, for tests.
func Registered() *Registry { return registry }
