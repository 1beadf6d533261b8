package toss

// LookupsWaiting is how many callers wait for the notification fetch of
// path in flight, besides the one that asked.
func (a *Adapter) LookupsWaiting(path string) int {
	a.lookups.mu.Lock()
	defer a.lookups.mu.Unlock()
	if f, ok := a.lookups.inFlight[path]; ok {
		return f.waiting
	}
	return 0
}
