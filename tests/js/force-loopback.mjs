// Preloaded with `node --import` by tests that start a third-party example
// server which listens on a bare port (all interfaces): a listen call with
// a port and no host gets 127.0.0.1, so the server is reachable from this
// machine only.
import net from 'node:net';

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const port = args[0];
  const bare = typeof port === 'number' || (typeof port === 'string' && /^\d+$/.test(port));
  if (bare && typeof args[1] !== 'string') {
    args.splice(1, 0, '127.0.0.1');
  }
  return listen.apply(this, args);
};
