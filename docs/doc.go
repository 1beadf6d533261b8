// Package docs holds the project's documentation; its tests check it.
package docs
