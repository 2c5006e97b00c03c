// cluster-key-slot (a dependency of ioredis, and of this package) ships no types.
declare module "cluster-key-slot" {
  /** The Redis Cluster hash slot of a key (its hash tag, when it has one). */
  function generate(key: string | Buffer): number;
  export = generate;
}
