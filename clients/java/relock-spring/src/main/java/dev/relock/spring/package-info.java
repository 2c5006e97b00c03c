/**
 * relock for Spring: {@link dev.relock.spring.RelockLockRegistry} (a Spring Integration
 * {@code LockRegistry}) and {@link dev.relock.spring.RelockAutoConfiguration} (Spring Boot).
 */
package dev.relock.spring;
