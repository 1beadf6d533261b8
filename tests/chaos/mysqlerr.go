package main

// errScanner finds the error packets in a MySQL server's stream to its
// client, so that a database proxy can count the errors it delivered by
// number (1213 deadlocks and certification conflicts, 1047 "not prepared"
// from a Galera node outside the primary component…). A packet is a 3-byte
// little-endian payload length, a sequence byte and the payload; an error
// packet's payload starts with 0xff and the 2-byte error number. No other
// packet a server sends starts with 0xff (a text result row would need a
// length prefix of 0xff, which the protocol does not define).
type errScanner struct {
	hdr    [4]byte
	nh     int // header bytes read
	left   int // payload bytes of the current packet not yet seen
	prefix [3]byte
	np     int // payload bytes captured into prefix
}

// feed scans the next bytes of the stream and calls found for every error
// packet that completes its first three bytes in b.
func (s *errScanner) feed(b []byte, found func(code uint16)) {
	for len(b) > 0 {
		if s.left == 0 {
			take := min(4-s.nh, len(b))
			copy(s.hdr[s.nh:], b[:take])
			s.nh += take
			b = b[take:]
			if s.nh == 4 {
				s.left = int(s.hdr[0]) | int(s.hdr[1])<<8 | int(s.hdr[2])<<16
				s.nh, s.np = 0, 0
			}
			continue
		}
		take := min(s.left, len(b))
		for i := 0; i < take && s.np < len(s.prefix); i++ {
			s.prefix[s.np] = b[i]
			s.np++
			if s.np == len(s.prefix) && s.prefix[0] == 0xff {
				found(uint16(s.prefix[1]) | uint16(s.prefix[2])<<8)
			}
		}
		s.left -= take
		b = b[take:]
	}
}
