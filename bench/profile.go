package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	rpprof "runtime/pprof"
	"time"
)

// startProfiles starts what the profiling flags ask for; the returned stop
// writes the profiles.
func startProfiles(o options, stderr io.Writer) (stop func() error, err error) {
	var stops []func() error
	stopAll := func() error {
		var errs []error
		for i := len(stops) - 1; i >= 0; i-- {
			errs = append(errs, stops[i]())
		}
		return errors.Join(errs...)
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return nil, err
		}
		if err := rpprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		stops = append(stops, func() error { rpprof.StopCPUProfile(); return f.Close() })
	}
	if o.mutexProfile != "" {
		runtime.SetMutexProfileFraction(10)
		stops = append(stops, func() error { return writeProfile("mutex", o.mutexProfile) })
	}
	if o.blockProfile != "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
		stops = append(stops, func() error { return writeProfile("block", o.blockProfile) })
	}
	if o.memProfile != "" {
		stops = append(stops, func() error { return writeProfile("allocs", o.memProfile) })
	}
	if o.pprofAddr != "" {
		ln, err := net.Listen("tcp", o.pprofAddr)
		if err != nil {
			return nil, errors.Join(err, stopAll())
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		fmt.Fprintf(stderr, "bench: pprof on http://%s/debug/pprof/\n", ln.Addr())
		stops = append(stops, srv.Close)
	}
	return stopAll, nil
}

func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rpprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
