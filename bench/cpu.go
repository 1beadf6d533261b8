package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuUse is how many CPU cores a phase kept busy, split by who: this
// process (the gateway, its clients and the floor loops), the database
// server (when it runs on this machine and can be found), the kernel's
// interrupt work (loopback TCP is largely softirq), and every other process
// on the machine, which is noise the numbers should be read against.
type cpuUse struct {
	Bench float64 `json:"bench_cores"`
	DB    float64 `json:"db_cores"`
	IRQ   float64 `json:"irq_cores"`
	Other float64 `json:"other_cores"`
	Idle  float64 `json:"idle_cores"`
	// PerRequest is the CPU time (bench + db + irq) one request or row cost,
	// in microseconds: unlike throughput, it hardly moves when other processes
	// take CPU away, so it compares runs on a busy machine.
	PerRequest float64 `json:"cpu_us_per_request"`
}

// cpuSample is a reading of the counters cpuUse is computed from.
type cpuSample struct {
	at           time.Time
	self         time.Duration
	db           time.Duration
	busy, idle   time.Duration
	irq          time.Duration
	dbKnown, sys bool
}

// clockTick is USER_HZ, the unit of /proc's CPU times; 100 on every Linux
// architecture Go supports.
const clockTick = 10 * time.Millisecond

func takeCPU(dbPID int) cpuSample {
	s := cpuSample{at: time.Now()}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if dbPID > 0 {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(dbPID) + "/stat"); err == nil {
			// Fields after the command name, which may hold spaces, in parentheses.
			if i := bytes.LastIndexByte(b, ')'); i > 0 {
				f := strings.Fields(string(b[i+1:]))
				if len(f) > 13 {
					u, _ := strconv.ParseInt(f[11], 10, 64)
					k, _ := strconv.ParseInt(f[12], 10, 64)
					s.db, s.dbKnown = time.Duration(u+k)*clockTick, true
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := bytes.Cut(b, []byte("\n"))
		f := strings.Fields(string(line))
		if len(f) > 8 && f[0] == "cpu" {
			var total int64
			for i, v := range f[1:9] { // user nice system idle iowait irq softirq steal
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
				switch i {
				case 3, 4:
					s.idle += time.Duration(n) * clockTick
				case 5, 6:
					s.irq += time.Duration(n) * clockTick
				}
			}
			s.busy = time.Duration(total)*clockTick - s.idle
			s.sys = true
		}
	}
	return s
}

func cpuBetween(a, b cpuSample) cpuUse {
	wall := b.at.Sub(a.at).Seconds()
	if wall <= 0 {
		return cpuUse{}
	}
	u := cpuUse{Bench: (b.self - a.self).Seconds() / wall}
	if a.dbKnown && b.dbKnown {
		u.DB = (b.db - a.db).Seconds() / wall
	}
	if a.sys && b.sys {
		u.Idle = (b.idle - a.idle).Seconds() / wall
		u.IRQ = (b.irq - a.irq).Seconds() / wall
		u.Other = max((b.busy-a.busy).Seconds()/wall-u.Bench-u.DB-u.IRQ, 0)
	}
	return u
}

// findDBPID finds the database server's process: the private server's pid
// file, or else the process listening on the server's loopback port. 0 when
// unknown (a remote server, or no permission to look).
func findDBPID(dataDir, addr string) int {
	if dataDir != "" {
		if b, err := os.ReadFile(filepath.Join(dataDir, "mysqld.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return pid
			}
		}
	}
	host, portText, err := net.SplitHostPort(addr)
	if err != nil || (host != "127.0.0.1" && host != "localhost") {
		return 0
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return 0
	}
	inode := listenInode(port)
	if inode == "" {
		return 0
	}
	want := "socket:[" + inode + "]"
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && l == want {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(fd))))
			return pid
		}
	}
	return 0
}

// listenInode is the socket inode listening on 127.0.0.1:port or 0.0.0.0:port.
func listenInode(port int) string {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return ""
	}
	suffix := fmt.Sprintf(":%04X", port)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if len(f) > 9 && f[3] == "0A" && strings.HasSuffix(f[1], suffix) &&
			(strings.HasPrefix(f[1], "0100007F") || strings.HasPrefix(f[1], "00000000")) {
			return f[9]
		}
	}
	return ""
}
