package jsclient

// The API's objects in gateway.d.ts are written from the OpenAPI document;
// clients/js/gen's test fails while they differ from it.
//go:generate go run ./gen
