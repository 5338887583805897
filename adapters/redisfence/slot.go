package redisfence

import "strings"

// markPrefix begins every key the Store keeps for itself. Data keys may not begin
// with it.
const markPrefix = "fencegate:"

// slots is the number of Redis Cluster hash slots.
const slots = 16384

// MarkKey returns the key of the hash holding resource's mark: fencegate:{resource}
// when the resource has no hash tag of its own, fencegate:resource when it does (a
// resource "{order-7}:invoice" has the tag order-7), so that the mark lives in the
// resource's slot and data keys tagged {resource} (or with the resource's own tag)
// share it on a Redis Cluster.
func MarkKey(resource string) string {
	if hashTag(resource) != resource {
		return markPrefix + resource
	}
	return markPrefix + "{" + resource + "}"
}

// hashTag returns the part of key Redis Cluster hashes: the text between the first
// '{' and the first '}' after it when that is not empty, else the whole key.
func hashTag(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

// Slot returns the Redis Cluster hash slot of key (CRC16-XMODEM of its hash tag,
// modulo 16384), as the server computes it.
func Slot(key string) int {
	var crc uint16
	for _, b := range []byte(hashTag(key)) {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % slots
}
