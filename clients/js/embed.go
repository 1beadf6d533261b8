// Package jsclient holds the gateway's browser client, the npm package in
// this directory (gateway.js, typed by gateway.d.ts), so that the gateway
// can serve it to its reference checkout page (gateway dev). Its tests run
// the client's own node tests against a real gateway.
package jsclient

import "embed"

// Files are the client's module and its types, as the npm package ships them.
//
//go:embed gateway.js gateway.d.ts
var Files embed.FS
