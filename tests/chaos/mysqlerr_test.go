package main

import (
	"slices"
	"testing"
)

// packet frames payload as a MySQL protocol packet.
func packet(seq byte, payload ...byte) []byte {
	n := len(payload)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}, payload...)
}

func TestErrScannerFindsErrorPacketsAcrossChunks(t *testing.T) {
	var stream []byte
	stream = append(stream, packet(1, 0x00, 0x01, 0x00)...)                     // OK
	stream = append(stream, packet(1, 0xff, 0xbd, 0x04, '#', '4', '0', '0')...) // ERR 1213
	stream = append(stream, packet(2, 0x03, 'a', 0xff, 0x17)...)                // a row holding 0xff bytes
	stream = append(stream, packet(1, 0xff, 0x17, 0x04, '#')...)                // ERR 1047
	stream = append(stream, packet(3)...)                                       // empty payload
	stream = append(stream, packet(1, 0xff, 0x26, 0x04)...)                     // ERR 1062
	want := []uint16{1213, 1047, 1062}
	// Every way of cutting the stream in two chunks, and one byte at a time.
	for cut := range len(stream) + 1 {
		var s errScanner
		var got []uint16
		s.feed(stream[:cut], func(c uint16) { got = append(got, c) })
		s.feed(stream[cut:], func(c uint16) { got = append(got, c) })
		if !slices.Equal(got, want) {
			t.Fatalf("cut at %d: found %v, want %v", cut, got, want)
		}
	}
	var s errScanner
	var got []uint16
	for _, b := range stream {
		s.feed([]byte{b}, func(c uint16) { got = append(got, c) })
	}
	if !slices.Equal(got, want) {
		t.Fatalf("byte by byte: found %v, want %v", got, want)
	}
}
