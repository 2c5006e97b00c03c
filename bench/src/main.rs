fn main() { println!("relock-bench: not written yet"); }
