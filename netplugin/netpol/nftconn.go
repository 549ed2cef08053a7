package netpol

import "bonsai.dev/bonsai/netplugin/nftconn"

// nftConn writes this package's tables: one transaction, one sendmsg.
type nftConn = nftconn.Conn

// openConn opens one, in the network namespace fd when fd >= 0 (tests).
func openConn(netnsFD int) (*nftConn, error) { return nftconn.Open(netnsFD) }
